// Writing JSON strings by hand, for the writers that build JSON text without a JSON library: the
// timeline (millions of events, appended into one buffer) and the benchmark rows. Readers use
// nlohmann::json through common/json_read.h.
#pragma once

#include <string>
#include <string_view>

namespace korovod {

// Appends `s` as the body of a JSON string (no quotes): quotes, backslashes and control
// characters escaped, valid UTF-8 passed through, each byte of invalid UTF-8 replaced by U+FFFD
// (a tensor name is arbitrary bytes; the output must stay valid JSON for any of them).
void AppendJsonEscaped(std::string& out, std::string_view s);

// `s` escaped and in double quotes.
std::string JsonQuoted(std::string_view s);

}  // namespace korovod
