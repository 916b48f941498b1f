// Chat templates: the Jinja template a model's tokenizer_config.json carries ("chat_template"),
// which turns a conversation into the prompt text the model was trained on. A subset of Jinja
// large enough for the templates of Llama 3, Qwen 2 and Mistral, rendered as Hugging Face's
// apply_chat_template renders them (trim_blocks and lstrip_blocks on, a trailing newline of the
// template dropped):
//
//   text, {{ expression }}, {# comments #}, whitespace control ({%- -%} {{- -}})
//   {% if %} {% elif %} {% else %} {% endif %}, {% for x in list %} ... {% endfor %} with
//   loop.index, loop.index0, loop.first, loop.last, loop.length, {% set name = expression %}
//   literals (strings, integers, true/false/none), names, a.b and a['b'], list[i]
//   + - * / // % ~, == != < <= > >=, in, not in, and, or, not, is [not] defined/none/string,
//   ( ), [list], filters |trim |length |lower |upper |string, raise_exception(message)
//
// Values are JSON (nlohmann::json). What the subset lacks (macros, other filters, methods) is
// a ChatTemplateError naming it when the template is read, never a wrong prompt; so is
// raise_exception, with the template's own message, when rendered.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace weft::serve {

class ChatTemplateError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ChatTemplate {
 public:
  // Parses `source`; throws ChatTemplateError naming what it does not understand.
  explicit ChatTemplate(const std::string& source);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  // The text for `context` (an object: messages, add_generation_prompt, bos_token, eos_token,
  // ...); throws ChatTemplateError (raise_exception, a type error, a loop past 100,000 turns, a
  // prompt over 16 MiB).
  std::string render(const nlohmann::json& context) const;

  struct Node;

 private:
  std::unique_ptr<Node> root_;
};

}  // namespace weft::serve
