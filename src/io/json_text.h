// JSON text for what weft prints or writes: model text can hold invalid UTF-8 (a token that cuts
// a character in two, byte-fallback tokens, a hostile file's metadata), which nlohmann::json's
// plain dump() throws on, killing a finished run at its last line. Here invalid bytes become
// U+FFFD; token ids, where a record has them, stay exact.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace weft {

inline std::string json_text(const nlohmann::json& j, int indent = -1) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace weft
