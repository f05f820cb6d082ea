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
  int train = -1;  // "weight" 0/1 or "loss" false/true; -1: unset (the assistant's are trained)
  bool trained() const { return role == "assistant" && train != 0; }
};

// The messages of one JSON Lines record: the array at "messages", each an object with string
// "role" and "content", and optionally OpenAI's "weight" (0 or 1) or ms-swift's "loss" (true,
// false, null); other keys skipped, but a non-empty "tool_calls" (which no built-in template
// renders) refused. A data error says what is wrong.
Status JsonChatMessages(std::string_view line, std::vector<ChatMessage>* messages);

// Usage error unless `chat_template` is chatml, llama3 or none. `command`: the subcommand whose
// --chat-template it is (pack, sample), for the messages.
Status CheckChatTemplate(const std::string& chat_template, const std::string& command = "pack");
// The template a pack (or sample --chat) uses: `requested` (--chat-template), or where it is
// empty the default for the tokenizer: for a tokenizer.json (--tokenizer hf) llama3 where
// Llama 3's <|start_header_id|> is one of its tokens and chatml's <|im_start|> is not, else
// chatml; none for the others, which have no special tokens for a template's markers.
std::string ChatTemplateFor(const std::string& requested, Tokenizer* tokenizer);

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
// The content and end marker (for none: the newline) of a trained message (an "assistant" one
// without "weight": 0 or "loss": false) get mask 1, tokenized apart from its header, as the model
// generates a reply after the header: the masked spans have exact token boundaries. Every other
// message is one piece with its header and end marker, tokenized as transformers'
// apply_chat_template tokenizes the whole text (the special tokens bound the pieces alike). The
// pieces get none of the tokenizer's own document markers (set_document_markers(false) while
// rendering). A data error for a message marked for training that is not the assistant's.
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
