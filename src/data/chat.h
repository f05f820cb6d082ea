// Chat conversations for `trainer pack --input-format chat`: a JSON Lines record
// {"messages": [{"role": ..., "content": ...}, ...]} (ms-swift's and OpenAI's shape) rendered with
// a built-in template (chatml, llama3, none) into tokens and a loss mask: 1 on the tokens of the
// assistant's content and its end marker, 0 elsewhere (docs/data-format.md, /loss_mask).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "data/tokenizer.h"

namespace trainer {

struct ChatMessage {
  std::string role;
  std::string content;
};

// The messages of one JSON Lines record: the array at "messages", each an object with string
// "role" and "content" (other keys skipped). A data error says what is wrong.
Status JsonChatMessages(std::string_view line, std::vector<ChatMessage>* messages);

// Usage error unless `chat_template` is chatml, llama3 or none. `command`: the subcommand whose
// --chat-template it is (pack, sample), for the messages.
Status CheckChatTemplate(const std::string& chat_template, const std::string& command = "pack");
// The template a pack uses: `requested` (--chat-template), or where it is empty the default for
// the tokenizer: chatml for a tokenizer.json (--tokenizer hf), none for the others, which have
// no special tokens for a template's markers.
std::string ChatTemplateFor(const std::string& requested, const Tokenizer& tokenizer);

// Usage error unless `tokenizer` can render `chat_template`: every marker of chatml or llama3 is
// one token of an hf tokenizer (bytes and gpt2 take none only; a marker split into ordinary
// tokens would be trained as text), and no SentencePiece tokenizer (its dummy prefix and
// normalization apply to each template piece apart).
Status CheckChatTokenizer(const std::string& chat_template, Tokenizer* tokenizer,
                          const std::string& command = "pack");

// Appends the tokens of the rendered conversation to *tokens and one mask byte per token to *mask.
// chatml: "<|im_start|>{role}\n" {content} "<|im_end|>" "\n" per message;
// llama3: "<|begin_of_text|>", then "<|start_header_id|>{role}<|end_header_id|>\n\n" {content}
// "<|eot_id|>" per message, the content trimmed as Llama 3's own template does (Jinja's trim:
// Python's str.strip, Unicode whitespace as str.isspace has it); none: {content} "\n" per message.
// Each piece is tokenized on its own (a document for the tokenizer), so the masked spans have exact
// token boundaries; the content and end marker (for none: the newline) of an "assistant" message
// get mask 1. The pieces get none of the tokenizer's own document markers
// (set_document_markers(false) while rendering).
Status RenderChat(const std::vector<ChatMessage>& messages, const std::string& chat_template,
                  Tokenizer* tokenizer, const std::string& source, std::vector<uint32_t>* tokens,
                  std::vector<uint8_t>* mask);

// The tokens a model continues to answer `messages` (`trainer sample --chat`): RenderChat's, then
// the assistant's header as transformers' apply_chat_template(add_generation_prompt=True) writes
// it: chatml "<|im_start|>assistant\n", llama3 "<|start_header_id|>assistant<|end_header_id|>\n\n",
// none nothing.
Status RenderChatPrompt(const std::vector<ChatMessage>& messages, const std::string& chat_template,
                        Tokenizer* tokenizer, std::vector<uint32_t>* tokens);
// The text that ends an assistant's reply, the last that its loss mask trains: "<|im_end|>",
// "<|eot_id|>", or for none the newline.
std::string ChatReplyEnd(const std::string& chat_template);

}  // namespace trainer
