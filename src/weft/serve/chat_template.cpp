#include "weft/serve/chat_template.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <map>
#include <vector>

namespace weft::serve {

namespace jinja {  // (named: ChatTemplate::Node holds its expressions)

using json = nlohmann::json;
const json kUndefined = json(json::value_t::discarded);

bool undefined(const json& v) { return v.is_discarded(); }

bool truthy(const json& v) {
  if (undefined(v) || v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number()) return v.get<double>() != 0;
  if (v.is_string()) return !v.get<std::string>().empty();
  return !v.empty();
}

// A value as Jinja prints it (Python's str()).
std::string text_of(const json& v) {
  if (undefined(v)) return "";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "None";
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  if (v.is_number_integer()) return std::to_string(v.get<std::int64_t>());
  if (v.is_number()) return v.dump();
  return v.dump();
}

std::string trimmed(const std::string& s) {
  const auto first = s.find_first_not_of(" \t\n\r\f\v");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t\n\r\f\v") - first + 1);
}

// ---- expressions ----

struct Scope {
  std::vector<json> frames;  // innermost last
  json lookup(const std::string& name) const {
    for (auto it = frames.rbegin(); it != frames.rend(); ++it)
      if (auto f = it->find(name); f != it->end()) return *f;
    return kUndefined;
  }
};

using Expr = std::function<json(const Scope&)>;

struct Token {
  enum Kind { kName, kString, kInteger, kOp, kEnd } kind = kEnd;
  std::string text;
};

std::vector<Token> lex(const std::string& s) {
  std::vector<Token> out;
  std::size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      std::size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      out.push_back({Token::kName, s.substr(i, j - i)});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      std::size_t j = i;
      while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      out.push_back({Token::kInteger, s.substr(i, j - i)});
      i = j;
    } else if (c == '\'' || c == '"') {
      std::string v;
      std::size_t j = i + 1;
      for (; j < s.size() && s[j] != c; ++j) {
        if (s[j] == '\\' && j + 1 < s.size()) {
          const char e = s[++j];
          v += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
        } else {
          v += s[j];
        }
      }
      if (j >= s.size()) throw ChatTemplateError("chat template: a string is not closed");
      out.push_back({Token::kString, v});
      i = j + 1;
    } else {
      static const char* two[] = {"==", "!=", "<=", ">=", "//"};
      std::string op(1, c);
      for (const char* t : two)
        if (s.compare(i, 2, t) == 0) op = t;
      if (std::string("+-*/%~=!<>()[].,|:").find(c) == std::string::npos)
        throw ChatTemplateError(std::string("chat template: unexpected character '") + c + "'");
      out.push_back({Token::kOp, op});
      i += op.size();
    }
  }
  out.push_back({Token::kEnd, ""});
  return out;
}

constexpr int kMaxDepth = 64;  // nested parentheses, brackets and blocks: a hostile template cannot exhaust the stack

class Parser {
 public:
  explicit Parser(const std::string& s) : t_(lex(s)) {
    if (t_.size() > 4096) throw ChatTemplateError("chat template: a tag of more than 4096 tokens");
  }
  Expr expression() {
    if (++depth_ > kMaxDepth) throw ChatTemplateError("chat template: expressions nested more than 64 deep");
    Expr e = or_expr();
    --depth_;
    return e;
  }
  bool at_end() const { return t_[at_].kind == Token::kEnd; }
  const Token& peek() const { return t_[at_]; }
  std::string name() {
    if (peek().kind != Token::kName) throw ChatTemplateError("chat template: a name was expected");
    return t_[at_++].text;
  }
  bool take(const std::string& op) {
    if ((peek().kind == Token::kOp || peek().kind == Token::kName) && peek().text == op) {
      ++at_;
      return true;
    }
    return false;
  }
  void expect(const std::string& op) {
    if (!take(op)) throw ChatTemplateError("chat template: '" + op + "' was expected, not '" + peek().text + "'");
  }
  void end() {
    if (!at_end()) throw ChatTemplateError("chat template: unexpected '" + peek().text + "'");
  }

 private:
  Expr or_expr() {
    Expr l = and_expr();
    while (take("or")) {
      Expr r = and_expr();
      l = [l = std::move(l), r = std::move(r)](const Scope& s) { json a = l(s); return truthy(a) ? a : r(s); };
    }
    return l;
  }
  Expr and_expr() {
    Expr l = not_expr();
    while (take("and")) {
      Expr r = not_expr();
      l = [l = std::move(l), r = std::move(r)](const Scope& s) { json a = l(s); return truthy(a) ? r(s) : a; };
    }
    return l;
  }
  Expr not_expr() {
    if (take("not")) {
      if (++depth_ > kMaxDepth) throw ChatTemplateError("chat template: expressions nested more than 64 deep");
      Expr e = not_expr();
      return [e = std::move(e)](const Scope& s) { return json(!truthy(e(s))); };
    }
    return comparison();
  }
  static bool contains(const json& whole, const json& part) {
    if (whole.is_string() && part.is_string()) return whole.get<std::string>().find(part.get<std::string>()) != std::string::npos;
    if (whole.is_array()) return std::find(whole.begin(), whole.end(), part) != whole.end();
    if (whole.is_object() && part.is_string()) return whole.contains(part.get<std::string>());
    return false;
  }
  Expr comparison() {
    Expr l = additive();
    while (true) {
      if (take("is")) {
        const bool negated = take("not");
        const std::string test = name();
        std::function<bool(const json&)> f;
        if (test == "defined") f = [](const json& v) { return !undefined(v); };
        else if (test == "undefined") f = [](const json& v) { return undefined(v); };
        else if (test == "none") f = [](const json& v) { return v.is_null(); };
        else if (test == "string") f = [](const json& v) { return v.is_string(); };
        else throw ChatTemplateError("chat template: the test 'is " + test + "' is not supported");
        l = [l = std::move(l), f, negated](const Scope& s) { return json(f(l(s)) != negated); };
        continue;
      }
      std::string op;
      for (const char* o : {"==", "!=", "<=", ">=", "<", ">", "in"})
        if (take(o)) {
          op = o;
          break;
        }
      if (op.empty() && peek().text == "not" && t_[at_ + 1].text == "in") {
        at_ += 2;
        op = "not in";
      }
      if (op.empty()) return l;
      Expr r = additive();
      l = [l = std::move(l), r = std::move(r), op](const Scope& s) {
        const json a = l(s), b = r(s);
        if (op == "==") return json(a == b);
        if (op == "!=") return json(a != b);
        if (op == "in") return json(contains(b, a));
        if (op == "not in") return json(!contains(b, a));
        if (!((a.is_number() && b.is_number()) || (a.is_string() && b.is_string())))
          throw ChatTemplateError("chat template: '" + op + "' compares values of other types");
        if (op == "<") return json(a < b);
        if (op == ">") return json(a > b);
        if (op == "<=") return json(a <= b);
        return json(a >= b);
      };
    }
  }
  Expr additive() {
    Expr l = multiplicative();
    while (true) {
      std::string op;
      for (const char* o : {"+", "-", "~"})
        if (take(o)) {
          op = o;
          break;
        }
      if (op.empty()) return l;
      Expr r = multiplicative();
      l = [l = std::move(l), r = std::move(r), op](const Scope& s) {
        const json a = l(s), b = r(s);
        if (op == "~") return json(text_of(a) + text_of(b));
        if (op == "+" && a.is_string() && b.is_string()) return json(a.get<std::string>() + b.get<std::string>());
        if (op == "+" && a.is_array() && b.is_array()) {
          json c = a;
          c.insert(c.end(), b.begin(), b.end());
          return c;
        }
        if (!a.is_number() || !b.is_number())
          throw ChatTemplateError("chat template: '" + op + "' of " + std::string(a.type_name()) + " and " + b.type_name());
        if (a.is_number_integer() && b.is_number_integer())
          return json(op == "+" ? a.get<std::int64_t>() + b.get<std::int64_t>() : a.get<std::int64_t>() - b.get<std::int64_t>());
        return json(op == "+" ? a.get<double>() + b.get<double>() : a.get<double>() - b.get<double>());
      };
    }
  }
  Expr multiplicative() {
    Expr l = unary();
    while (true) {
      std::string op;
      for (const char* o : {"*", "//", "/", "%"})
        if (take(o)) {
          op = o;
          break;
        }
      if (op.empty()) return l;
      Expr r = unary();
      l = [l = std::move(l), r = std::move(r), op](const Scope& s) {
        const json a = l(s), b = r(s);
        if (!a.is_number() || !b.is_number()) throw ChatTemplateError("chat template: '" + op + "' of values that are not numbers");
        const bool ints = a.is_number_integer() && b.is_number_integer();
        if (op == "*") return ints ? json(a.get<std::int64_t>() * b.get<std::int64_t>()) : json(a.get<double>() * b.get<double>());
        if (b.get<double>() == 0) throw ChatTemplateError("chat template: division by zero");
        if (op == "/") return json(a.get<double>() / b.get<double>());
        if (ints) {  // Python's floor division and modulo
          const std::int64_t x = a.get<std::int64_t>(), y = b.get<std::int64_t>();
          std::int64_t q = x / y;
          if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
          return op == "//" ? json(q) : json(x - q * y);
        }
        const double q = std::floor(a.get<double>() / b.get<double>());
        return op == "//" ? json(q) : json(a.get<double>() - q * b.get<double>());
      };
    }
  }
  Expr unary() {
    if (take("-")) {
      if (++depth_ > kMaxDepth) throw ChatTemplateError("chat template: expressions nested more than 64 deep");
      Expr e = unary();
      return [e = std::move(e)](const Scope& s) {
        const json v = e(s);
        if (v.is_number_integer()) return json(-v.get<std::int64_t>());
        if (v.is_number()) return json(-v.get<double>());
        throw ChatTemplateError("chat template: '-' of a value that is not a number");
      };
    }
    return postfix(primary());
  }
  Expr filter(Expr e) {
    const std::string f = name();
    if (f == "trim") return [e = std::move(e)](const Scope& s) { return json(trimmed(text_of(e(s)))); };
    if (f == "string") return [e = std::move(e)](const Scope& s) { return json(text_of(e(s))); };
    if (f == "lower" || f == "upper")
      return [e = std::move(e), f](const Scope& s) {
        std::string v = text_of(e(s));
        for (char& c : v) c = static_cast<char>(f == "lower" ? std::tolower(static_cast<unsigned char>(c)) : std::toupper(static_cast<unsigned char>(c)));
        return json(v);
      };
    if (f == "length")
      return [e = std::move(e)](const Scope& s) {
        const json v = e(s);
        if (v.is_string()) return json(static_cast<std::int64_t>(v.get<std::string>().size()));
        if (v.is_array() || v.is_object()) return json(static_cast<std::int64_t>(v.size()));
        throw ChatTemplateError("chat template: |length of a value without one");
      };
    throw ChatTemplateError("chat template: the filter '" + f + "' is not supported");
  }
  Expr postfix(Expr e) {
    while (true) {
      if (take(".")) {
        const std::string key = name();
        if (peek().text == "(") throw ChatTemplateError("chat template: method calls ('." + key + "()') are not supported");
        e = [e = std::move(e), key](const Scope& s) {
          const json v = e(s);
          return v.is_object() && v.contains(key) ? v[key] : kUndefined;
        };
      } else if (take("[")) {
        Expr index = expression();
        expect("]");
        e = [e = std::move(e), index = std::move(index)](const Scope& s) {
          const json v = e(s), i = index(s);
          if (v.is_object() && i.is_string()) return v.contains(i.get<std::string>()) ? v[i.get<std::string>()] : kUndefined;
          if (v.is_array() && i.is_number_integer()) {
            std::int64_t k = i.get<std::int64_t>();
            if (k < 0) k += static_cast<std::int64_t>(v.size());
            return k >= 0 && k < static_cast<std::int64_t>(v.size()) ? v[static_cast<std::size_t>(k)] : kUndefined;
          }
          return kUndefined;
        };
      } else if (take("|")) {
        e = filter(e);
      } else {
        return e;
      }
    }
  }
  Expr primary() {
    const Token tok = peek();
    ++at_;
    if (tok.kind == Token::kString) return [v = json(tok.text)](const Scope&) { return v; };
    if (tok.kind == Token::kInteger) {
      if (tok.text.size() > 15) throw ChatTemplateError("chat template: an integer too large");
      return [v = json(std::stoll(tok.text))](const Scope&) { return v; };
    }
    if (tok.kind == Token::kOp && tok.text == "(") {
      Expr e = expression();
      expect(")");
      return e;
    }
    if (tok.kind == Token::kOp && tok.text == "[") {
      std::vector<Expr> items;
      if (!take("]")) {
        do items.push_back(expression());
        while (take(","));
        expect("]");
      }
      return [items](const Scope& s) {
        json a = json::array();
        for (const Expr& i : items) a.push_back(i(s));
        return a;
      };
    }
    if (tok.kind != Token::kName) throw ChatTemplateError("chat template: unexpected '" + tok.text + "'");
    const std::string& n = tok.text;
    if (n == "true" || n == "True") return [](const Scope&) { return json(true); };
    if (n == "false" || n == "False") return [](const Scope&) { return json(false); };
    if (n == "none" || n == "None") return [](const Scope&) { return json(nullptr); };
    if (peek().text == "(" && peek().kind == Token::kOp) {
      ++at_;
      std::vector<Expr> args;
      if (!take(")")) {
        do args.push_back(expression());
        while (take(","));
        expect(")");
      }
      if (n == "raise_exception" && args.size() == 1)
        return [a = args[0]](const Scope& s) -> json { throw ChatTemplateError(text_of(a(s))); };
      if (n == "range" && args.size() == 1)
        return [a = args[0]](const Scope& s) {
          const json v = a(s);
          if (!v.is_number_integer() || v.get<std::int64_t>() > 100000) throw ChatTemplateError("chat template: range() of a bad count");
          json out = json::array();
          for (std::int64_t i = 0; i < v.get<std::int64_t>(); ++i) out.push_back(i);
          return out;
        };
      throw ChatTemplateError("chat template: the function '" + n + "' is not supported");
    }
    return [n](const Scope& s) { return s.lookup(n); };
  }

  std::vector<Token> t_;
  std::size_t at_ = 0;
  int depth_ = 0;
};

}  // namespace jinja

using namespace jinja;

// ---- statements ----

struct ChatTemplate::Node {
  enum Kind { kBlock, kText, kOutput, kIf, kFor, kSet } kind = kBlock;
  std::string text;                          // kText; kFor, kSet: the name
  std::vector<Expr> conditions;              // kIf: one per branch (the else branch: none); kOutput, kFor, kSet: one
  std::vector<std::unique_ptr<Node>> parts;  // kBlock: in order; kIf: a block per branch; kFor: the body
};

namespace {

using Node = ChatTemplate::Node;

struct Segment {
  enum Kind { kText, kExpr, kStmt } kind;
  std::string body;
};

// The template cut into text, {{ }} and {% %} (comments dropped), with the whitespace rules:
// a '-' inside a tag strips the whitespace on its side; trim_blocks removes the first newline
// after a statement or comment; lstrip_blocks removes spaces and tabs before one at the start
// of a line.
std::vector<Segment> segments(const std::string& src) {
  std::vector<Segment> out;
  std::size_t at = 0;
  bool trim_next = false, block_newline = false;
  auto add_text = [&](std::string t, bool strip_right, bool lstrip, bool at_start) {
    if (trim_next) t.erase(0, t.find_first_not_of(" \t\n\r"));
    // (lstrip_blocks looks at the line as written, before trim_blocks takes its newline)
    if (!strip_right && lstrip) {
      const auto nl = t.find_last_of('\n');
      const std::size_t line = nl == std::string::npos ? 0 : nl + 1;
      if (t.find_first_not_of(" \t", line) == std::string::npos && (nl != std::string::npos || at_start))
        t.erase(line);
    }
    if (block_newline && !t.empty() && t[0] == '\n') t.erase(0, 1);
    else if (block_newline && t.size() > 1 && t[0] == '\r' && t[1] == '\n') t.erase(0, 2);
    if (strip_right) {
      const auto last = t.find_last_not_of(" \t\n\r");
      t.erase(last == std::string::npos ? 0 : last + 1);
    }
    if (!t.empty()) out.push_back({Segment::kText, t});
  };
  while (at < src.size()) {
    const std::size_t open = src.find('{', at);
    std::size_t tag = open;
    while (tag != std::string::npos && tag + 1 < src.size() && src[tag + 1] != '{' && src[tag + 1] != '%' && src[tag + 1] != '#')
      tag = src.find('{', tag + 1);
    if (tag == std::string::npos || tag + 1 >= src.size()) {
      add_text(src.substr(at), false, false, at == 0);
      break;
    }
    const char kind = src[tag + 1];
    const std::string close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    const std::size_t end = src.find(close, tag + 2);
    if (end == std::string::npos) throw ChatTemplateError("chat template: a tag is not closed");
    std::string inner = src.substr(tag + 2, end - tag - 2);
    const bool strip_left = !inner.empty() && inner.front() == '-';
    const bool strip_right = !inner.empty() && inner.back() == '-';
    if (strip_left) inner.erase(0, 1);
    if (strip_right) inner.pop_back();
    const bool block = kind != '{';
    add_text(src.substr(at, tag - at), strip_left, block && !(!inner.empty() && inner.front() == '+'), at == 0);
    trim_next = strip_right;
    block_newline = block && !strip_right;
    if (kind == '{') out.push_back({Segment::kExpr, inner});
    else if (kind == '%') out.push_back({Segment::kStmt, trimmed(inner)});
    at = end + 2;
  }
  return out;
}

// Parses segments [at, ...) into `block` until a statement in `stops` (returned, or "" at the end).
std::string parse_block(const std::vector<Segment>& segs, std::size_t& at, Node& block,
                        const std::vector<std::string>& stops, int depth = 0) {
  if (depth > kMaxDepth) throw ChatTemplateError("chat template: blocks nested more than 64 deep");
  while (at < segs.size()) {
    const Segment& s = segs[at++];
    if (s.kind == Segment::kText) {
      auto n = std::make_unique<Node>();
      n->kind = Node::kText;
      n->text = s.body;
      block.parts.push_back(std::move(n));
      continue;
    }
    if (s.kind == Segment::kExpr) {
      Parser p(s.body);
      auto n = std::make_unique<Node>();
      n->kind = Node::kOutput;
      n->conditions.push_back(p.expression());
      p.end();
      block.parts.push_back(std::move(n));
      continue;
    }
    Parser p(s.body);
    const std::string word = p.name();
    if (std::find(stops.begin(), stops.end(), word) != stops.end()) {
      --at;  // the caller reads the stop statement itself
      return word;
    }
    auto n = std::make_unique<Node>();
    if (word == "if") {
      n->kind = Node::kIf;
      std::string stop = "elif";
      Parser cond(s.body.substr(2));
      n->conditions.push_back(cond.expression());
      cond.end();
      while (true) {
        auto branch = std::make_unique<Node>();
        stop = parse_block(segs, at, *branch, {"elif", "else", "endif"}, depth + 1);
        n->parts.push_back(std::move(branch));
        if (stop.empty()) throw ChatTemplateError("chat template: an if without endif");
        Parser st(segs[at++].body);
        st.name();
        if (stop == "endif") break;
        if (stop == "elif") {
          n->conditions.push_back(st.expression());
          st.end();
        }
      }
    } else if (word == "for") {
      n->kind = Node::kFor;
      n->text = p.name();
      p.expect("in");
      n->conditions.push_back(p.expression());
      p.end();
      auto body = std::make_unique<Node>();
      if (parse_block(segs, at, *body, {"endfor"}, depth + 1).empty())
        throw ChatTemplateError("chat template: a for without endfor");
      ++at;
      n->parts.push_back(std::move(body));
    } else if (word == "set") {
      n->kind = Node::kSet;
      n->text = p.name();
      if (p.peek().text == ".") throw ChatTemplateError("chat template: setting an attribute (namespace) is not supported");
      p.expect("=");
      n->conditions.push_back(p.expression());
      p.end();
    } else {
      throw ChatTemplateError("chat template: the statement '" + word + "' is not supported");
    }
    block.parts.push_back(std::move(n));
  }
  return "";
}

constexpr std::int64_t kMaxIterations = 100000;
constexpr std::size_t kMaxOutput = std::size_t{16} << 20;

void run(const Node& n, Scope& scope, std::string& out, std::int64_t& iterations) {
  switch (n.kind) {
    case Node::kBlock:
      for (const auto& p : n.parts) run(*p, scope, out, iterations);
      return;
    case Node::kText:
    case Node::kOutput:
      out += n.kind == Node::kText ? n.text : text_of(n.conditions[0](scope));
      if (out.size() > kMaxOutput) throw ChatTemplateError("chat template: a prompt of more than 16 MiB");
      return;
    case Node::kSet: scope.frames.back()[n.text] = n.conditions[0](scope); return;
    case Node::kIf:
      for (std::size_t b = 0; b < n.parts.size(); ++b) {
        if (b >= n.conditions.size() || truthy(n.conditions[b](scope))) {
          run(*n.parts[b], scope, out, iterations);
          return;
        }
      }
      return;
    case Node::kFor: {
      json items = n.conditions[0](scope);
      if (undefined(items) || items.is_null()) return;
      if (items.is_object()) {
        json keys = json::array();
        for (const auto& [k, v] : items.items()) keys.push_back(k);
        items = keys;
      }
      if (!items.is_array()) throw ChatTemplateError("chat template: a for over a value that is not a list");
      const auto count = static_cast<std::int64_t>(items.size());
      for (std::int64_t i = 0; i < count; ++i) {
        if (++iterations > kMaxIterations) throw ChatTemplateError("chat template: more than 100,000 loop turns");
        json frame = json::object();
        frame[n.text] = items[static_cast<std::size_t>(i)];
        frame["loop"] = {{"index", i + 1}, {"index0", i}, {"first", i == 0}, {"last", i + 1 == count},
                         {"length", count}, {"revindex", count - i}, {"revindex0", count - i - 1}};
        scope.frames.push_back(std::move(frame));
        run(*n.parts[0], scope, out, iterations);
        scope.frames.pop_back();
      }
      return;
    }
  }
}

}  // namespace

ChatTemplate::ChatTemplate(const std::string& source) : root_(std::make_unique<Node>()) {
  // Jinja drops one newline at the template's end (keep_trailing_newline is off).
  std::string text = source;
  if (text.size() >= 2 && text.compare(text.size() - 2, 2, "\r\n") == 0) text.resize(text.size() - 2);
  else if (!text.empty() && text.back() == '\n') text.pop_back();
  const std::vector<Segment> segs = segments(text);
  std::size_t at = 0;
  parse_block(segs, at, *root_, {});
  if (at < segs.size()) {
    Parser p(segs[at].body);
    throw ChatTemplateError("chat template: '" + p.name() + "' without its opening statement");
  }
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::render(const json& context) const {
  if (!context.is_object()) throw ChatTemplateError("chat template: the context is not an object");
  Scope scope;
  scope.frames.push_back(context);
  scope.frames.push_back(json::object());  // the template's own sets
  std::string out;
  std::int64_t iterations = 0;
  run(*root_, scope, out, iterations);
  return out;
}

}  // namespace weft::serve
