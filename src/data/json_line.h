// JsonStringField: the text of one document of a JSON Lines corpus (`trainer pack --input-format
// jsonl`): the string value of one key of the JSON object on a line, its escapes decoded to UTF-8.
// Written here rather than taken from yaml-cpp, which rejects the surrogate-pair escapes
// ("\ud83d\ude00") that Python's json module writes for every character beyond U+FFFF.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace trainer {

// Appends the decoded string value of `key` (a key of the top-level object on `line`) to *text.
// A lone surrogate escape decodes as U+FFFD; bytes that are not escapes are copied as they are; a
// repeated key takes its last value (as Python's json module does).
// A data error says what is wrong (not an object, no such key, a value that is not a string, a
// broken escape or an unterminated string); the caller adds the file and line.
Status JsonStringField(std::string_view line, const std::string& key, std::string* text);

}  // namespace trainer
