// MaskSecrets: a configuration value as an operator may be shown it (GET
// /config, GET /config/adapters): the password of every URL's user info
// (redis://user:PASSWORD@host) and the value of every JSON string field
// whose name says it holds a secret (password, secret, token, key material:
// "auth", "credential") become "***". Everything else is kept as given.
//
// Thread-safety: a pure function.
#pragma once

#include <string>
#include <string_view>

namespace lmcache {

std::string MaskSecrets(std::string_view value);

}  // namespace lmcache
