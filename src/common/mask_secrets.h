// MaskSecrets: a configuration value as an operator may be shown it (GET
// /config, GET /config/adapters, /status, logs): the password of a URL's
// user info (redis://user:PASSWORD@host) and the value of every JSON string
// field whose name says it holds a secret (password, secret, token, key
// material: "auth", "credential") become "***". Everything else is kept as
// given.
//
// By structure, never by guessing where a URL ends (issue 62, section 7): a
// value that is JSON is read token by token, each string value one URL; any
// other value is one URL. A URL's user info runs to its last '@', as the
// resp adapter's parser reads it, so a password holding ',', a space or a
// quote is masked whole. Several URLs are masked one by one before they are
// joined into one text (the resp adapter's description does).
//
// Thread-safety: a pure function.
#pragma once

#include <string>
#include <string_view>

namespace lmcache {

std::string MaskSecrets(std::string_view value);

}  // namespace lmcache
