#include "tier/l2_cascade.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>

namespace lmcache::tier {

// Which removed entries have drained: each entry's destructor says so, on
// whatever thread dropped the last View holding it.
struct L2Cascade::Drains {
  Mutex mu;
  CondVar changed;
  std::set<std::uint64_t> drained LMC_GUARDED_BY(mu);

  void Drained(std::uint64_t number) {
    {
      MutexLock lock(&mu);
      drained.insert(number);
    }
    changed.NotifyAll();
  }
  // Takes `number`'s mark, waiting up to `timeout` for it; false if it
  // did not come.
  bool Has(std::uint64_t number) {
    MutexLock lock(&mu);
    return drained.contains(number);
  }
  bool Take(std::uint64_t number, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    MutexLock lock(&mu);
    while (!drained.contains(number)) {
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) return false;
      changed.WaitFor(&lock, deadline - now);
    }
    drained.erase(number);
    return true;
  }
};

struct L2Cascade::Entry {
  Entry(L2CascadeMember m, std::uint64_t n, std::shared_ptr<Drains> d)
      : member(std::move(m)), number(n), drains(std::move(d)) {}
  // The last View holding a removed entry ends here (a list being replaced
  // drops only entries that are in its successor too, which live on).
  ~Entry() { drains->Drained(number); }
  Entry(const Entry&) = delete;
  Entry& operator=(const Entry&) = delete;

  const L2CascadeMember member;
  const std::uint64_t number;
  const std::shared_ptr<Drains> drains;
};

struct L2Cascade::Kept {
  std::string name;
  std::string exclusive;
  std::unique_ptr<L2Adapter> owned;  // null when borrowed
  std::function<void(L2Adapter&)> farewell;
  L2Adapter* adapter = nullptr;
};

namespace {

// A given name: a letter, then letters, digits, '.', '_' or '-' (64 at
// most), so it never looks like a position (1) or a made name (fs#1).
Status CheckGivenName(std::string_view name) {
  const auto allowed = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  };
  if (name.empty() || name.size() > 64 || !std::isalpha(static_cast<unsigned char>(name[0])) ||
      !std::all_of(name.begin(), name.end(), allowed)) {
    return InvalidConfig(
        "an L2 adapter's name must start with a letter and hold only letters, "
        "digits, '.', '_' and '-' (64 at most), got '" +
        std::string(name) + "'");
  }
  return Status::Ok();
}

}  // namespace

L2Adapter& L2Cascade::View::adapter(std::size_t i) const { return *(*list_)[i]->member.adapter; }

const L2CascadeMember& L2Cascade::View::member(std::size_t i) const { return (*list_)[i]->member; }

std::vector<L2Adapter*> L2Cascade::View::adapters() const {
  std::vector<L2Adapter*> out;
  for (std::size_t i = 0; i < size(); ++i) out.push_back(&adapter(i));
  return out;
}

std::optional<std::size_t> L2Cascade::View::Find(std::string_view name) const {
  for (std::size_t i = 0; i < size(); ++i) {
    if (member(i).name == name) return i;
  }
  return std::nullopt;
}

L2Cascade::L2Cascade() : drains_(std::make_shared<Drains>()), list_(std::make_shared<List>()) {}

L2Cascade::~L2Cascade() {
  std::map<std::uint64_t, std::unique_ptr<Kept>> kept;
  {
    MutexLock lock(&mu_);
    list_.reset();  // the entries go (no View may be held any more)
    kept.swap(members_);
    kept.merge(draining_);
  }
  // Not removed: no farewell (what they hold is still theirs, for the next start).
  for (auto& [number, k] : kept) Destroy(std::move(k), /*farewell=*/false);
}

std::unique_ptr<L2Cascade> L2Cascade::Borrowing(const std::vector<L2Adapter*>& adapters) {
  auto cascade = std::make_unique<L2Cascade>();
  for (L2Adapter* adapter : adapters) {
    auto added = cascade->InsertBorrowed(adapter, {});
    (void)added;  // a made name is never taken
  }
  return cascade;
}

L2Cascade::View L2Cascade::Current() const {
  MutexLock lock(&mu_);
  return View(list_);
}

Result<std::string> L2Cascade::Insert(std::unique_ptr<L2Adapter> adapter, Addition addition) {
  L2Adapter* raw = adapter.get();
  return Add(raw, std::move(adapter), std::move(addition));
}

Result<std::string> L2Cascade::InsertBorrowed(L2Adapter* adapter, Addition addition) {
  return Add(adapter, nullptr, std::move(addition));
}

bool L2Cascade::NameTakenLocked(std::string_view name) const {
  const auto named = [name](const auto& item) { return item.second->name == name; };
  return std::any_of(members_.begin(), members_.end(), named) ||
         std::any_of(draining_.begin(), draining_.end(), named);
}

Result<std::string> L2Cascade::Add(L2Adapter* adapter, std::unique_ptr<L2Adapter> owned,
                                   Addition addition) {
  if (!addition.name.empty()) LMC_RETURN_IF_ERROR(CheckGivenName(addition.name));
  // The adapter's type, asked before the lock (Stats may take the adapter's own).
  const L2AdapterStats stats = adapter->Stats();
  const std::string& type = stats.type;
  MutexLock lock(&mu_);
  const std::size_t size = list_->size();
  const std::size_t position = addition.position.value_or(size);
  if (position > size) {
    return InvalidConfig("position " + std::to_string(position + 1) +
                         " is past the cascade's end (" + std::to_string(size) +
                         " adapters: at most " + std::to_string(size + 1) + ")");
  }
  // A made name is <type>-<n>: nothing a URL path or query must escape. n
  // counts every adapter given since the start (so a name never moves to
  // another adapter), stepping past one an operator gave already.
  std::string name = addition.name;
  if (name.empty()) {
    while (NameTakenLocked(type + "-" + std::to_string(next_number_))) next_number_ += 1;
    name = type + "-" + std::to_string(next_number_);
  }
  if (NameTakenLocked(name)) {
    return Status(ErrorCode::kAlreadyExists,
                  "an L2 adapter named '" + name + "' exists" +
                      (addition.name.empty() ? "" : ": give this one another \"name\""));
  }
  if (!addition.exclusive.empty()) {
    if (const auto holder = HolderLocked(addition.exclusive)) {
      return Status(ErrorCode::kAlreadyExists,
                    "L2 adapter " + *holder + " already stores there (" + addition.exclusive + ")");
    }
  }
  const std::uint64_t number = next_number_;
  next_number_ += 1;
  auto kept = std::make_unique<Kept>();
  kept->name = name;
  kept->exclusive = addition.exclusive;
  kept->owned = std::move(owned);
  kept->farewell = std::move(addition.farewell);
  kept->adapter = adapter;
  members_[number] = std::move(kept);
  auto list = std::make_shared<List>(*list_);
  list->insert(list->begin() + static_cast<std::ptrdiff_t>(position),
               std::make_shared<const Entry>(
                   L2CascadeMember{name, std::move(addition.config), stats.description, adapter},
                   number, drains_));
  PublishLocked(std::move(list));
  return name;
}

void L2Cascade::PublishLocked(std::shared_ptr<const List> list) {
  const bool stores = std::any_of(list->begin(), list->end(), [](const auto& entry) {
    return entry->member.adapter->TakesStores();
  });
  list_ = std::move(list);
  takes_stores_.store(stores, std::memory_order_release);
}

Result<L2Cascade::Removal> L2Cascade::Remove(std::string_view name,
                                             std::chrono::milliseconds drain_timeout) {
  Removal removal;
  std::uint64_t number = 0;
  std::shared_ptr<const Entry> entry;  // ours until the description is read
  {
    MutexLock lock(&mu_);
    auto it = std::find_if(list_->begin(), list_->end(),
                           [name](const auto& e) { return e->member.name == name; });
    if (it == list_->end()) {
      return Status(ErrorCode::kNotFound, "no L2 adapter named '" + std::string(name) +
                                              "' (GET /config/adapters lists them)");
    }
    entry = *it;
    number = entry->number;
    removal.name = entry->member.name;
    auto list = std::make_shared<List>(*list_);
    list->erase(list->begin() + (it - list_->begin()));
    PublishLocked(std::move(list));  // the old list holds the entry still
    draining_[number] = std::move(members_[number]);
    members_.erase(number);
  }
  removal.description = entry->member.description;
  entry.reset();
  // From here on, no new View holds the entry: in-flight ones end it.
  spdlog::info("L2 adapter {} ({}) left the cascade; draining its stores and loads", removal.name,
               removal.description);
  if (drains_->Take(number, drain_timeout)) {
    std::unique_ptr<Kept> kept;
    {
      MutexLock lock(&mu_);
      kept = std::move(draining_[number]);
      draining_.erase(number);
    }
    Destroy(std::move(kept), /*farewell=*/true);
    removal.drained = Drained::kDrained;
  }
  return removal;
}

std::size_t L2Cascade::Reap() {
  std::vector<std::unique_ptr<Kept>> done;
  std::size_t left = 0;
  {
    MutexLock lock(&mu_);
    for (auto it = draining_.begin(); it != draining_.end();) {
      if (drains_->Take(it->first, std::chrono::milliseconds(0))) {
        done.push_back(std::move(it->second));
        it = draining_.erase(it);
      } else {
        ++it;
      }
    }
    left = draining_.size();
  }
  for (auto& kept : done) Destroy(std::move(kept), /*farewell=*/true);
  return left;
}

std::vector<std::string> L2Cascade::Draining() const {
  MutexLock lock(&mu_);
  std::vector<std::string> names;
  for (const auto& [number, kept] : draining_) {
    if (!drains_->Has(number)) names.push_back(kept->name);
  }
  return names;
}

std::optional<std::string> L2Cascade::Holder(std::string_view exclusive) const {
  MutexLock lock(&mu_);
  return HolderLocked(exclusive);
}

std::optional<std::string> L2Cascade::HolderLocked(std::string_view exclusive) const {
  for (const auto* kept : {&members_, &draining_}) {
    for (const auto& [number, k] : *kept) {
      if (!k->exclusive.empty() && k->exclusive == exclusive) return k->name;
    }
  }
  return std::nullopt;
}

void L2Cascade::Destroy(std::unique_ptr<Kept> kept, bool farewell) {
  if (!kept) return;
  if (farewell && kept->farewell) {
    try {
      kept->farewell(*kept->adapter);
    } catch (const std::exception& e) {
      spdlog::error("L2 adapter {}: its farewell failed: {}", kept->name, e.what());
    }
  }
  if (farewell && kept->owned) spdlog::info("L2 adapter {} drained and closed", kept->name);
  kept.reset();
}

}  // namespace lmcache::tier
