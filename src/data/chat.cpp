// RenderChat and CheckChatTemplate (see chat.h); JsonChatMessages is in json_line.cpp.
#include "data/chat.h"

#include <utf8proc.h>

#include <algorithm>

#include "common/log.h"

namespace trainer {
namespace {

// The tokenizer without its own document markers (BOS, post-processor tokens) while in scope:
// the template writes its own markers around each piece.
class WithoutDocumentMarkers {
 public:
  explicit WithoutDocumentMarkers(Tokenizer* tokenizer) : tokenizer_(tokenizer) {
    tokenizer_->set_document_markers(false);
  }
  ~WithoutDocumentMarkers() { tokenizer_->set_document_markers(true); }
  WithoutDocumentMarkers(const WithoutDocumentMarkers&) = delete;
  WithoutDocumentMarkers& operator=(const WithoutDocumentMarkers&) = delete;

 private:
  Tokenizer* tokenizer_;
};

// Appends the tokens of `text` (one tokenizer document) with mask `masked`.
Status Piece(Tokenizer* tokenizer, const std::string& source, const std::string& text,
             uint8_t masked, std::vector<uint32_t>* tokens, std::vector<uint8_t>* mask) {
  if (text.empty()) return Status::Ok();
  tokenizer->BeginDocument(source);
  TRAINER_RETURN_IF_ERROR(
      tokenizer->Encode(reinterpret_cast<const uint8_t*>(text.data()), text.size(), tokens));
  TRAINER_RETURN_IF_ERROR(tokenizer->EndDocument(tokens));
  mask->resize(tokens->size(), masked);
  return Status::Ok();
}

// Whether Python's str.isspace holds for `c`: category Zs, or bidirectional class WS, B or S.
bool PythonSpace(utf8proc_int32_t c) {
  const utf8proc_property_t* property = utf8proc_get_property(c);
  return property->category == UTF8PROC_CATEGORY_ZS ||
         property->bidi_class == UTF8PROC_BIDI_CLASS_WS ||
         property->bidi_class == UTF8PROC_BIDI_CLASS_B ||
         property->bidi_class == UTF8PROC_BIDI_CLASS_S;
}

// `text` without the whitespace at its ends, as Python's str.strip() (Jinja's trim) leaves it.
// Bytes that are not UTF-8 count as text.
std::string PythonStrip(const std::string& text) {
  const auto* bytes = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  const auto size = static_cast<utf8proc_ssize_t>(text.size());
  utf8proc_ssize_t begin = size, end = 0;
  for (utf8proc_ssize_t at = 0; at < size;) {
    utf8proc_int32_t c = -1;
    const utf8proc_ssize_t n = utf8proc_iterate(bytes + at, size - at, &c);
    const utf8proc_ssize_t next = at + (n > 0 ? n : 1);
    if (n <= 0 || !PythonSpace(c)) {
      begin = std::min(begin, at);
      end = next;
    }
    at = next;
  }
  return begin < end ? text.substr(begin, end - begin) : std::string();
}

// The roles of the chat templates' models: a role outside them is a mislabelled message (the
// assistant's, which alone is trained, or another dataset format's).
bool KnownRole(const std::string& role) {
  return role == "system" || role == "developer" || role == "user" || role == "assistant" ||
         role == "tool" || role == "function" || role == "ipython";
}

// The special tokens `chat_template` writes (none for "none").
std::vector<std::string> ChatMarkers(const std::string& chat_template) {
  if (chat_template == "chatml") return {"<|im_start|>", "<|im_end|>"};
  if (chat_template == "llama3")
    return {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
  return {};
}

}  // namespace

Status CheckChatTokenizer(const std::string& chat_template, Tokenizer* tokenizer,
                          const std::string& command) {
  if (tokenizer->name() == "sentencepiece")
    return UsageError(StrFormat(
        "a chat template with a SentencePiece tokenizer (%s): it encodes each piece of the "
        "template apart, giving every reply a spurious leading U+2581 (its word marker) and "
        "losing its newlines. %s",
        command.c_str(),
        command == "pack" ? "Use --tokenizer hf with the model's tokenizer.json (byte-level BPE), "
                            "or pack the rendered text with --input-format jsonl (no loss mask)"
                          : "Give the rendered conversation as a plain --prompt"));
  const std::vector<std::string> markers = ChatMarkers(chat_template);
  if (markers.empty()) return Status::Ok();
  if (tokenizer->name() != "hf")
    return UsageError(StrFormat(
        "--chat-template %s (%s) writes special tokens such as %s, and the %s tokenizer has "
        "none: they would be ordinary text. Use --chat-template none, or %s with a "
        "tokenizer.json of that chat format",
        chat_template.c_str(), command.c_str(), markers.front().c_str(), tokenizer->name().c_str(),
        command == "pack" ? "--tokenizer hf" : "--tokenizer-dir"));
  const WithoutDocumentMarkers pieces_alone(tokenizer);
  for (const std::string& marker : markers) {
    std::vector<uint32_t> tokens;
    std::vector<uint8_t> mask;
    TRAINER_RETURN_IF_ERROR(Piece(tokenizer, "--chat-template", marker, 0, &tokens, &mask));
    if (tokens.size() == 1) continue;
    return UsageError(StrFormat(
        "--chat-template %s (%s): the tokenizer has no token %s (it splits into %zu tokens), "
        "so the template's markers would be ordinary text. Pass the --chat-template of the "
        "tokenizer's model (chatml: Qwen, SmolLM2; llama3: Llama 3), or none",
        chat_template.c_str(), command.c_str(), marker.c_str(), tokens.size()));
  }
  return Status::Ok();
}

std::string ChatTemplateFor(const std::string& requested, Tokenizer* tokenizer) {
  if (!requested.empty()) return requested;
  if (tokenizer->name() != "hf") return "none";
  const WithoutDocumentMarkers pieces_alone(tokenizer);
  const auto one_token = [&](const std::string& marker) {
    std::vector<uint32_t> tokens;
    std::vector<uint8_t> mask;
    return Piece(tokenizer, "--chat-template", marker, 0, &tokens, &mask).ok() &&
           tokens.size() == 1;
  };
  return !one_token("<|im_start|>") && one_token("<|start_header_id|>") ? "llama3" : "chatml";
}

Status CheckChatTemplate(const std::string& chat_template, const std::string& command) {
  if (chat_template == "chatml" || chat_template == "llama3" || chat_template == "none")
    return Status::Ok();
  return UsageError("unknown --chat-template (" + command + "): '" + chat_template +
                    "'. Use chatml (Qwen, SmolLM2), llama3 or none");
}

Status RenderChat(const std::vector<ChatMessage>& messages, const std::string& chat_template,
                  Tokenizer* tokenizer, const std::string& source, std::vector<uint32_t>* tokens,
                  std::vector<uint8_t>* mask) {
  TRAINER_RETURN_IF_ERROR(CheckChatTemplate(chat_template));
  mask->resize(tokens->size(), 0);
  // The template writes the markers: no BOS (or post-processor tokens) around each piece.
  const WithoutDocumentMarkers pieces_alone(tokenizer);
  const auto piece = [&](const std::string& text, bool masked) {
    return Piece(tokenizer, source, text, masked ? 1 : 0, tokens, mask);
  };
  for (const ChatMessage& message : messages) {
    if (!KnownRole(message.role))
      return DataError(StrFormat(
          "unknown chat role (%s, --input-format chat): \"%s\". Use system, developer, user, "
          "assistant, tool, function or ipython (only the assistant's tokens are trained; "
          "ShareGPT's human and gpt are user and assistant)",
          source.c_str(), message.role.c_str()));
    if (message.train == 1 && message.role != "assistant")
      return DataError(
          StrFormat("a %s message marked for training (%s, --input-format chat: \"weight\": 1 or "
                    "\"loss\": true): only the assistant's messages are trained. Remove the mark",
                    message.role.c_str(), source.c_str()));
  }
  if (chat_template == "llama3") TRAINER_RETURN_IF_ERROR(piece("<|begin_of_text|>", false));
  for (const ChatMessage& message : messages) {
    const bool trained = message.trained();
    // A trained reply is tokenized apart from its header, as the model generates it after the
    // header; any other message as one piece with its header and end marker, as the tokenizer
    // reads the whole rendered text (apply_chat_template): the special tokens bound the pieces,
    // and the header's newline may join a leading space or newline of the content.
    if (chat_template == "chatml") {
      const std::string header = "<|im_start|>" + message.role + "\n";
      if (!trained) {
        TRAINER_RETURN_IF_ERROR(piece(header + message.content + "<|im_end|>", false));
      } else {
        TRAINER_RETURN_IF_ERROR(piece(header, false));
        TRAINER_RETURN_IF_ERROR(piece(message.content, true));
        TRAINER_RETURN_IF_ERROR(piece("<|im_end|>", true));
      }
      TRAINER_RETURN_IF_ERROR(piece("\n", false));
    } else if (chat_template == "llama3") {
      const std::string header = "<|start_header_id|>" + message.role + "<|end_header_id|>\n\n";
      const std::string content = PythonStrip(message.content);
      if (!trained) {
        TRAINER_RETURN_IF_ERROR(piece(header + content + "<|eot_id|>", false));
      } else {
        TRAINER_RETURN_IF_ERROR(piece(header, false));
        TRAINER_RETURN_IF_ERROR(piece(content, true));
        TRAINER_RETURN_IF_ERROR(piece("<|eot_id|>", true));
      }
    } else {
      TRAINER_RETURN_IF_ERROR(piece(message.content, trained));
      TRAINER_RETURN_IF_ERROR(piece("\n", trained));
    }
  }
  return Status::Ok();
}

Status RenderChatPrompt(const std::vector<ChatMessage>& messages, const std::string& chat_template,
                        Tokenizer* tokenizer, std::vector<uint32_t>* tokens) {
  std::vector<uint8_t> mask;
  TRAINER_RETURN_IF_ERROR(
      RenderChat(messages, chat_template, tokenizer, "--prompt", tokens, &mask));
  const std::string header = chat_template == "chatml"   ? "<|im_start|>assistant\n"
                             : chat_template == "llama3" ? "<|start_header_id|>assistant"
                                                           "<|end_header_id|>\n\n"
                                                         : "";
  const WithoutDocumentMarkers pieces_alone(tokenizer);
  return Piece(tokenizer, "--prompt", header, 0, tokens, &mask);
}

std::string ChatReplyEnd(const std::string& chat_template) {
  if (chat_template == "chatml") return "<|im_end|>";
  if (chat_template == "llama3") return "<|eot_id|>";
  return "\n";
}

}  // namespace trainer
