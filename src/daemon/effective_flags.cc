#include "daemon/effective_flags.h"

#include "common/mask_secrets.h"

namespace lmcache::daemon {

std::vector<FlagValue> EffectiveFlags(const CLI::App& app) {
  std::vector<FlagValue> flags;
  for (const CLI::Option* option : app.get_options()) {
    const std::string name = option->get_name();
    if (name.empty() || name == "--help" || name == "--version" || !name.starts_with("--")) {
      continue;
    }
    FlagValue flag;
    flag.name = name;
    flag.repeatable = option->get_expected_max() > 1 || option->get_items_expected_max() > 1 ||
                      option->get_multi_option_policy() == CLI::MultiOptionPolicy::TakeAll;
    flag.given = option->count() > 0;
    if (flag.given) {
      flag.values = option->results();
    } else if (!option->get_default_str().empty()) {
      flag.values = {option->get_default_str()};
    }
    for (std::string& value : flag.values) value = MaskSecrets(value);
    flags.push_back(std::move(flag));
  }
  return flags;
}

}  // namespace lmcache::daemon
