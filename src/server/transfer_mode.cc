#include "server/transfer_mode.h"

namespace lmcache::server {

void TransferMode::AddOp(OpTable* table, const OpSpec& spec, Handler handler) const {
  if (serving_) {
    table->Add(spec, std::move(handler));
    return;
  }
  const std::string why = std::string(spec.name) + " belongs to the " + std::string(name()) +
                          " transfer mode, which this server does not serve "
                          "(--supported-transfer-mode)";
  table->Add(spec, [why](const RequestContext&, Payloads, const Respond& respond) {
    respond(Status(ErrorCode::kNotSupported, why));
  });
}

bool ModeServes(std::string_view setting, std::string_view name) {
  return setting == "auto" || setting == name;
}

}  // namespace lmcache::server
