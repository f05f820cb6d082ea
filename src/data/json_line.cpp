// The string field of a JSON Lines record (see json_line.h): a scanner over one object that decodes
// strings and skips every other value.
#include "data/json_line.h"

#include <cstdlib>

#include "common/log.h"
#include "data/chat.h"

namespace trainer {
namespace {

class JsonScanner {
 public:
  explicit JsonScanner(std::string_view text) : text_(text) {}

  void SkipSpace() {
    while (at_ < text_.size() &&
           (text_[at_] == ' ' || text_[at_] == '\t' || text_[at_] == '\r' || text_[at_] == '\n'))
      ++at_;
  }
  bool Take(char c) {
    SkipSpace();
    if (at_ >= text_.size() || text_[at_] != c) return false;
    ++at_;
    return true;
  }
  char Peek() {
    SkipSpace();
    return at_ < text_.size() ? text_[at_] : '\0';
  }
  // After the line's object: nothing but white space (json.loads refuses "Extra data").
  Status End() {
    SkipSpace();
    if (at_ == text_.size()) return Status::Ok();
    return DataError("more after the object's closing '}' (JSON Lines: one object on each line)");
  }

  // A string at the cursor (after its opening quote was taken), decoded into *out (or skipped when
  // out is null).
  Status String(std::string* out) {
    while (at_ < text_.size()) {
      const char c = text_[at_++];
      if (c == '"') return Status::Ok();
      if (c != '\\') {
        if (out) out->push_back(c);
        continue;
      }
      if (at_ >= text_.size()) break;
      const char e = text_[at_++];
      static constexpr std::string_view kFrom = "\"\\/bfnrt", kTo = "\"\\/\b\f\n\r\t";
      const size_t simple = kFrom.find(e);
      if (simple != std::string_view::npos) {
        if (out) out->push_back(kTo[simple]);
        continue;
      }
      if (e != 'u') return DataError(StrFormat("a bad escape '\\%c' in a string", e));
      uint32_t code_point = 0;
      TRAINER_RETURN_IF_ERROR(Hex4(&code_point));
      if (code_point >= 0xD800 && code_point <= 0xDBFF && text_.substr(at_, 2) == "\\u") {
        const size_t back = at_;
        at_ += 2;
        uint32_t low = 0;
        TRAINER_RETURN_IF_ERROR(Hex4(&low));
        if (low >= 0xDC00 && low <= 0xDFFF)
          code_point = 0x10000 + ((code_point - 0xD800) << 10) + (low - 0xDC00);
        else
          at_ = back;  // not a pair: the high half stands alone
      }
      if (code_point >= 0xD800 && code_point <= 0xDFFF) code_point = 0xFFFD;
      if (out) AppendUtf8(code_point, out);
    }
    return DataError("an unterminated string");
  }

  // Any value at the cursor, skipped (strings with their escapes, nested objects and arrays).
  Status SkipValue() {
    const char c = Peek();
    if (c == '"') {
      ++at_;
      return String(nullptr);
    }
    if (c == '{' || c == '[') {
      std::string closers;  // the brackets still open, innermost last
      while (at_ < text_.size()) {
        const char d = text_[at_++];
        if (d == '"') {
          TRAINER_RETURN_IF_ERROR(String(nullptr));
        } else if (d == '{' || d == '[') {
          closers.push_back(d == '{' ? '}' : ']');
        } else if (d == '}' || d == ']') {
          if (d != closers.back()) return DataError(StrFormat("a stray '%c'", d));
          closers.pop_back();
          if (closers.empty()) return Status::Ok();
        }
      }
      return DataError("an unterminated object or array");
    }
    return Literal(nullptr);
  }

  // A number, true, false or null at the cursor: its text into *out (when given).
  Status Literal(std::string* out) {
    SkipSpace();
    const size_t start = at_;
    while (at_ < text_.size() && text_[at_] != ',' && text_[at_] != '}' && text_[at_] != ']' &&
           text_[at_] != ' ' && text_[at_] != '\t' && text_[at_] != '\r')
      ++at_;
    if (out) out->assign(text_.substr(start, at_ - start));
    return at_ > start ? Status::Ok() : DataError("a missing value");
  }

 private:
  Status Hex4(uint32_t* value) {
    if (at_ + 4 > text_.size()) return DataError("a broken \\u escape");
    for (int i = 0; i < 4; ++i) {
      const char h = text_[at_++];
      const int digit = (h >= '0' && h <= '9')   ? h - '0'
                        : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                        : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                                 : -1;
      if (digit < 0) return DataError("a broken \\u escape");
      *value = (*value << 4) | static_cast<uint32_t>(digit);
    }
    return Status::Ok();
  }
  static void AppendUtf8(uint32_t c, std::string* out) {
    if (c < 0x80) {
      out->push_back(static_cast<char>(c));
    } else if (c < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (c >> 6)));
      out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else if (c < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (c >> 12)));
      out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (c >> 18)));
      out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
  }

  std::string_view text_;
  size_t at_ = 0;

 public:
  // After the opening '{' was taken: each key, then fn(key) reads or skips its value.
  template <typename Fn>
  Status Members(Fn fn) {
    if (Take('}')) return Status::Ok();
    std::string name;
    for (;;) {
      name.clear();
      if (!Take('"')) return DataError("a key that is not a string");
      TRAINER_RETURN_IF_ERROR(String(&name));
      if (!Take(':')) return DataError(StrFormat("no ':' after \"%s\"", name.c_str()));
      TRAINER_RETURN_IF_ERROR(fn(name));
      if (Take(',')) continue;
      if (Take('}')) return Status::Ok();
      return DataError("a missing ',' or '}'");
    }
  }
};

// A message's "weight" (OpenAI's fine-tuning files: 0 or 1) or "loss" (ms-swift's: true, false
// or null) into message->train.
Status TrainFlag(JsonScanner* json, const std::string& field, ChatMessage* message) {
  std::string value;
  TRAINER_RETURN_IF_ERROR(json->Literal(&value));
  char* end = nullptr;
  const double number = field == "weight" ? std::strtod(value.c_str(), &end) : -1;
  const bool numeric = end != nullptr && end != value.c_str() && *end == '\0';
  if (field == "weight" && numeric && (number == 0 || number == 1)) {  // 0, 1, 0.0, 1e0
    message->train = number == 1;
  } else if (field == "loss" && (value == "true" || value == "false")) {
    message->train = value == "true";
  } else if (field != "loss" || value != "null") {
    return DataError(StrFormat("a message's \"%s\" is %s: use %s", field.c_str(), value.c_str(),
                               field == "weight" ? "0 (not trained) or 1 (OpenAI's weight)"
                                                 : "true, false or null (ms-swift's loss)"));
  }
  return Status::Ok();
}

}  // namespace

Status JsonChatMessages(std::string_view line, std::vector<ChatMessage>* messages) {
  JsonScanner json(line);
  if (!json.Take('{')) return DataError("not a JSON object");
  bool found = false;
  TRAINER_RETURN_IF_ERROR(json.Members([&](const std::string& key) -> Status {
    if (key != "messages") return json.SkipValue();
    if (!json.Take('[')) return DataError("\"messages\" is not an array");
    found = true;
    messages->clear();
    if (json.Take(']')) return Status::Ok();
    for (;;) {
      if (!json.Take('{')) return DataError("a message that is not an object");
      ChatMessage message;
      bool role = false, content = false;
      TRAINER_RETURN_IF_ERROR(json.Members([&](const std::string& field) -> Status {
        if (field == "weight" || field == "loss") return TrainFlag(&json, field, &message);
        if (field == "tool_calls") {  // null or [] says there are none
          if (!json.Take('[')) return json.SkipValue();
          if (json.Take(']')) return Status::Ok();
          return DataError(
              "a message with \"tool_calls\", which the built-in chat templates do not render "
              "(they would be dropped): write the calls into its \"content\" as the model's own "
              "template does (Qwen2.5: <tool_call>{...}</tool_call>)");
        }
        if (field != "role" && field != "content") return json.SkipValue();
        std::string* out = field == "role" ? &message.role : &message.content;
        (field == "role" ? role : content) = true;
        if (!json.Take('"'))
          return DataError(StrFormat("a message's \"%s\" is not a string", field.c_str()));
        out->clear();
        return json.String(out);
      }));
      if (!role || !content)
        return DataError(StrFormat("message %zu has no \"%s\"", messages->size() + 1,
                                   role ? "content" : "role"));
      messages->push_back(std::move(message));
      if (json.Take(',')) continue;
      if (json.Take(']')) return Status::Ok();
      return DataError("a missing ',' or ']' in \"messages\"");
    }
  }));
  if (!found) return DataError("no \"messages\" in the object");
  return json.End();
}

Status JsonStringField(std::string_view line, const std::string& key, std::string* text) {
  JsonScanner json(line);
  if (!json.Take('{')) return DataError("not a JSON object");
  std::string value;
  bool found = false;  // a repeated key takes its last value, as Python's json does
  TRAINER_RETURN_IF_ERROR(json.Members([&](const std::string& name) -> Status {
    if (name != key) return json.SkipValue();
    if (!json.Take('"')) return DataError(StrFormat("\"%s\" is not a string", key.c_str()));
    value.clear();
    found = true;
    return json.String(&value);
  }));
  if (!found) return DataError(StrFormat("no \"%s\" in the object", key.c_str()));
  TRAINER_RETURN_IF_ERROR(json.End());
  text->append(value);
  return Status::Ok();
}

}  // namespace trainer
