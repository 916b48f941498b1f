// Gpt2Tokenizer (text.h): GPT-2's byte-level BPE, from vocab.json + merges.txt or a
// tokenizer.json. Merging follows Hugging Face's tokenizers: a heap of the adjacent pairs by
// (rank, position), so a word costs O(n log n) whatever its length.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>

#include "weft/data/text.h"
#include "weft/util/error.h"
#include "weft/util/utf8.h"

namespace weft {

namespace {

using json = nlohmann::json;

// GPT-2's pre-tokenizer pattern (OpenAI's encoder.py; Hugging Face's ByteLevel).
constexpr const char* kPattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::int64_t kMaxVocab = 1 << 24;

void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// GPT-2's bytes_to_unicode: the printable bytes stand for themselves, the other 68 for the
// code points from 256 on, in byte order.
std::array<std::uint32_t, 256> byte_code_points() {
  std::array<std::uint32_t, 256> cp{};
  std::uint32_t next = 256;
  for (std::uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    cp[b] = printable ? b : next++;
  }
  return cp;
}

// The code points of valid UTF-8 `s` (the vocabulary's JSON strings are).
std::vector<std::uint32_t> code_points(const std::string& s) {
  std::vector<std::uint32_t> out;
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    std::uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k < n && i + static_cast<std::size_t>(k) < s.size(); ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(s[i + static_cast<std::size_t>(k)]) & 0x3F);
    out.push_back(cp);
    i += static_cast<std::size_t>(n);
  }
  return out;
}

std::uint64_t pair_key(std::int32_t a, std::int32_t b) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
}

// A merge "a b": two tokens and one space; nullopt otherwise.
std::optional<std::pair<std::string, std::string>> split_merge(const std::string& line) {
  const std::size_t space = line.find(' ');
  if (space == 0 || space == std::string::npos || space + 1 == line.size() || line.find(' ', space + 1) != std::string::npos)
    return std::nullopt;
  return std::pair{line.substr(0, space), line.substr(space + 1)};
}

}  // namespace

struct Gpt2Tokenizer::State {
  std::vector<std::string> tokens;  // by id, as the vocabulary spells them ("" for an unused id)
  std::vector<std::string> bytes;   // by id: the bytes a token stands for
  std::unordered_map<std::string, std::int32_t> ids;
  std::vector<std::pair<std::string, std::string>> merges;  // by rank
  struct Merge {
    std::int32_t rank, into;
  };
  std::unordered_map<std::uint64_t, Merge> merge_of;
  std::array<std::int32_t, 256> byte_token{};
  std::vector<std::pair<std::string, std::int32_t>> specials;  // longest first
  std::int32_t end_of_text = -1;
  std::string unknown;  // the token a byte without its own stands for ("": every byte has one)
  std::string split;    // the pre-tokenizer's pattern (GPT-2's, or a tokenizer.json's Split)
  bool ignore_merges = false;  // a word the vocabulary holds whole is that token (Llama 3)
  std::array<std::string, 256> stand_in;  // each byte's stand-in character, in UTF-8
  pcre2_code* pattern = nullptr;

  ~State() {
    if (pattern) pcre2_code_free(pattern);
  }

  std::vector<std::int32_t> merge_word(std::string_view word) const;
  void encode_plain(std::string_view text, std::vector<std::int32_t>& out) const;
};

namespace {

// The id of `token`, or a DataError naming what referred to it.
std::int32_t id_of(const Gpt2Tokenizer::State& s, const std::string& token, const std::string& source,
                   const std::string& where) {
  auto it = s.ids.find(token);
  if (it == s.ids.end()) throw DataError(source + ": " + where + " '" + token + "' is not in the vocabulary");
  return it->second;
}

}  // namespace

// The State is built in one place from a vocabulary, merges and special tokens, checked.
static std::unique_ptr<Gpt2Tokenizer::State> build_state(const json& vocab, const std::vector<std::pair<std::string, std::string>>& merges,
                                                         const std::vector<std::pair<std::string, std::int64_t>>& added,
                                                         const std::string& source, const std::string& unknown = "",
                                                         const std::string& split = kPattern, bool ignore_merges = false) {
  auto s = std::make_unique<Gpt2Tokenizer::State>();
  s->unknown = unknown;
  s->split = split;
  s->ignore_merges = ignore_merges;
  if (!vocab.is_object() || vocab.empty()) throw DataError(source + ": the vocabulary is not a JSON object of tokens");
  std::vector<std::pair<std::string, std::int64_t>> entries;
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer()) throw DataError(source + ": the id of token '" + token + "' is not an integer");
    entries.emplace_back(token, id.get<std::int64_t>());
  }
  entries.insert(entries.end(), added.begin(), added.end());
  // Ids run from 0 with few gaps (a hostile file's huge id must not size the table).
  std::int64_t size = 0;
  for (const auto& [token, id] : entries) {
    if (id < 0 || id >= kMaxVocab)
      throw DataError(source + ": token '" + token + "' has id " + std::to_string(id) + ", outside 0.." + std::to_string(kMaxVocab - 1));
    if (token.empty()) throw DataError(source + ": an empty token");
    size = std::max(size, id + 1);
  }
  if (size > 2 * static_cast<std::int64_t>(entries.size()) + 256)
    throw DataError(source + ": the ids go up to " + std::to_string(size - 1) + " for " + std::to_string(entries.size()) + " tokens");
  s->tokens.resize(static_cast<std::size_t>(size));
  for (const auto& [token, id] : entries) {
    std::string& slot = s->tokens[static_cast<std::size_t>(id)];
    if (!slot.empty() && slot != token) throw DataError(source + ": id " + std::to_string(id) + " is given to two tokens");
    slot = token;
    auto [it, fresh] = s->ids.emplace(token, static_cast<std::int32_t>(id));
    if (!fresh && it->second != id) throw DataError(source + ": token '" + token + "' has two ids");
  }

  // What each token stands for: its stand-in characters mapped back to bytes (a token with
  // other characters, such as an added one, stands for its own text).
  const auto cps = byte_code_points();
  std::unordered_map<std::uint32_t, char> byte_of;
  for (int b = 0; b < 256; ++b) byte_of[cps[static_cast<std::size_t>(b)]] = static_cast<char>(b);
  s->bytes.resize(s->tokens.size());
  for (std::size_t id = 0; id < s->tokens.size(); ++id) {
    std::string out;
    bool all_bytes = true;
    for (std::uint32_t cp : code_points(s->tokens[id])) {
      auto it = byte_of.find(cp);
      if (it == byte_of.end()) {
        all_bytes = false;
        break;
      }
      out += it->second;
    }
    s->bytes[id] = all_bytes ? out : s->tokens[id];
  }
  const std::int32_t unknown_id = unknown.empty() ? -1 : id_of(*s, unknown, source, "unk_token");
  for (int b = 0; b < 256; ++b) {
    std::string& stand_in = s->stand_in[static_cast<std::size_t>(b)];
    append_utf8(stand_in, cps[static_cast<std::size_t>(b)]);
    s->byte_token[static_cast<std::size_t>(b)] =
        unknown_id >= 0 && !s->ids.count(stand_in) ? unknown_id
                                                   : id_of(*s, stand_in, source, "the token of byte " + std::to_string(b) + ",");
  }

  s->merges = merges;
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    const std::string where = "merge " + std::to_string(rank + 1) + " (" + a + " " + b + "):";
    const std::int32_t left = id_of(*s, a, source, where), right = id_of(*s, b, source, where);
    const std::int32_t into = id_of(*s, a + b, source, where);
    // A pair listed twice keeps its first (lowest) rank, as the reference implementations do.
    s->merge_of.emplace(pair_key(left, right), Gpt2Tokenizer::State::Merge{static_cast<std::int32_t>(rank), into});
  }

  for (const auto& [token, id] : added) s->specials.emplace_back(token, static_cast<std::int32_t>(id));
  if (auto it = s->ids.find("<|endoftext|>"); it != s->ids.end()) {
    s->end_of_text = it->second;
    if (std::none_of(s->specials.begin(), s->specials.end(), [](const auto& p) { return p.first == "<|endoftext|>"; }))
      s->specials.emplace_back("<|endoftext|>", it->second);
  }
  std::stable_sort(s->specials.begin(), s->specials.end(),
                   [](const auto& x, const auto& y) { return x.first.size() > y.first.size(); });

  int error = 0;
  PCRE2_SIZE offset = 0;
  s->pattern = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(split.c_str()), split.size(), PCRE2_UTF | PCRE2_UCP, &error,
                             &offset, nullptr);
  if (!s->pattern)
    throw DataError(source + ": the pre-tokenizer's pattern does not compile (PCRE2 error " + std::to_string(error) +
                    " at " + std::to_string(offset) + ")");
  pcre2_jit_compile(s->pattern, PCRE2_JIT_COMPLETE);  // faster when the JIT is there; works without
  return s;
}

std::vector<std::int32_t> Gpt2Tokenizer::State::merge_word(std::string_view word) const {
  // The word's bytes as a linked list of pieces; the heap holds candidate pairs by (rank,
  // position of the left piece), each checked against the list when popped.
  const std::size_t n = word.size();
  if (ignore_merges && n > 1) {
    std::string whole;
    for (char c : word) whole += stand_in[static_cast<unsigned char>(c)];
    if (auto it = ids.find(whole); it != ids.end()) return {it->second};
  }
  std::vector<std::int32_t> piece(n);
  std::vector<std::int64_t> prev(n), next(n);
  for (std::size_t i = 0; i < n; ++i) {
    piece[i] = byte_token[static_cast<unsigned char>(word[i])];
    prev[i] = static_cast<std::int64_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<std::int64_t>(i + 1) : -1;
  }
  struct Candidate {
    std::int32_t rank;
    std::int64_t left;
    std::int32_t a, b, into;  // the pieces it was made for, and what they merge into
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto consider = [&](std::int64_t left) {
    if (left < 0 || next[static_cast<std::size_t>(left)] < 0) return;
    const auto l = static_cast<std::size_t>(left), r = static_cast<std::size_t>(next[l]);
    auto it = merge_of.find(pair_key(piece[l], piece[r]));
    if (it != merge_of.end()) heap.push({it->second.rank, left, piece[l], piece[r], it->second.into});
  };
  for (std::size_t i = 0; i + 1 < n; ++i) consider(static_cast<std::int64_t>(i));
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const auto l = static_cast<std::size_t>(c.left);
    if (piece[l] != c.a || next[l] < 0 || piece[static_cast<std::size_t>(next[l])] != c.b) continue;  // stale
    const auto r = static_cast<std::size_t>(next[l]);
    piece[l] = c.into;
    piece[r] = -1;
    next[l] = next[r];
    if (next[r] >= 0) prev[static_cast<std::size_t>(next[r])] = c.left;
    consider(prev[l]);
    consider(c.left);
  }
  std::vector<std::int32_t> out;
  for (std::int64_t i = n ? 0 : -1; i >= 0; i = next[static_cast<std::size_t>(i)]) out.push_back(piece[static_cast<std::size_t>(i)]);
  return out;
}

void Gpt2Tokenizer::State::encode_plain(std::string_view text, std::vector<std::int32_t>& out) const {
  const std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> owned(
      pcre2_match_data_create_from_pattern(pattern, nullptr), &pcre2_match_data_free);
  if (!owned) throw std::bad_alloc();
  pcre2_match_data* match = owned.get();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t at = 0;
  while (at < text.size()) {
    const int rc = pcre2_match(pattern, subject, text.size(), at, PCRE2_NO_UTF_CHECK, match, nullptr);
    std::size_t begin = at, end = text.size();
    if (rc > 0) {
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
      begin = ovector[0];
      end = std::max(ovector[1], begin + 1);
    }
    // (Every character is a letter, digit, space or other symbol, so the pattern matches at
    // `at`; a gap would still be encoded, as its own word.)
    if (begin > at) {
      auto gap = merge_word(text.substr(at, begin - at));
      out.insert(out.end(), gap.begin(), gap.end());
    }
    auto word = merge_word(text.substr(begin, end - begin));
    out.insert(out.end(), word.begin(), word.end());
    at = end;
  }
}

Gpt2Tokenizer::~Gpt2Tokenizer() = default;

std::unique_ptr<Gpt2Tokenizer> Gpt2Tokenizer::from_files(const std::string& vocab_json, const std::string& merges_txt,
                                                         const std::string& source) {
  json vocab;
  try {
    vocab = json::parse(vocab_json);
  } catch (const json::exception&) {
    throw DataError(source + ": vocab.json is not valid JSON");
  }
  std::vector<std::pair<std::string, std::string>> merges;
  std::size_t begin = 0, line_number = 0;
  while (begin < merges_txt.size()) {
    std::size_t end = merges_txt.find('\n', begin);
    if (end == std::string::npos) end = merges_txt.size();
    std::string line = merges_txt.substr(begin, end - begin);
    begin = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (line_number == 1 && line.rfind("#version", 0) == 0)) continue;
    auto merge = split_merge(line);
    if (!merge) throw DataError(source + ": merges.txt line " + std::to_string(line_number) + " is not two tokens: '" + line + "'");
    merges.push_back(std::move(*merge));
  }
  std::unique_ptr<Gpt2Tokenizer> t(new Gpt2Tokenizer());
  t->s_ = build_state(vocab, merges, {}, source);
  return t;
}

std::unique_ptr<Gpt2Tokenizer> Gpt2Tokenizer::from_tokenizer_json(const std::string& text, const std::string& source) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception&) {
    throw DataError(source + ": not valid JSON");
  }
  try {
    const json& model = doc.at("model");
    if (model.value("type", std::string("BPE")) != "BPE")
      throw DataError(source + ": a " + model.value("type", std::string()) + " model, not a byte-level BPE (GPT-2's)");
    // The pre-tokenizer: GPT-2's (ByteLevel with its pattern), or a Split by a pattern of the
    // file's own followed by ByteLevel without one (Llama 3's, Qwen 2's).
    const json& pre = doc.contains("pre_tokenizer") ? doc["pre_tokenizer"] : json();
    std::string split = kPattern;
    auto byte_level = [](const json& p, bool regex) {
      return p.is_object() && p.value("type", std::string()) == "ByteLevel" && p.value("use_regex", true) == regex;
    };
    if (pre.is_object() && pre.value("type", std::string()) == "Sequence" && pre.contains("pretokenizers") &&
        pre["pretokenizers"].is_array() && pre["pretokenizers"].size() == 2 && byte_level(pre["pretokenizers"][1], false)) {
      const json& s = pre["pretokenizers"][0];
      if (s.value("type", std::string()) != "Split" || !s.contains("pattern") || !s["pattern"].contains("Regex") ||
          s.value("behavior", std::string()) != "Isolated" || s.value("invert", false))
        throw DataError(source + ": the pre-tokenizer's first step is not a Split by a Regex, Isolated");
      split = s["pattern"]["Regex"].get<std::string>();
    } else if (!byte_level(pre, true)) {
      throw DataError(source + ": the pre-tokenizer is neither GPT-2's (ByteLevel with its pattern) nor a Split by a "
                               "pattern then ByteLevel (Llama 3's, Qwen 2's)");
    }
    std::vector<std::pair<std::string, std::string>> merges;
    for (const json& m : model.at("merges")) {
      if (m.is_array() && m.size() == 2) {
        merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
        continue;
      }
      const std::string line = m.get<std::string>();
      auto merge = split_merge(line);
      if (!merge) throw DataError(source + ": merge '" + line + "' is not two tokens");
      merges.push_back(std::move(*merge));
    }
    std::vector<std::pair<std::string, std::int64_t>> added;
    if (doc.contains("added_tokens") && doc["added_tokens"].is_array())
      for (const json& a : doc["added_tokens"]) added.emplace_back(a.at("content").get<std::string>(), a.at("id").get<std::int64_t>());
    std::string unknown;
    if (model.contains("unk_token") && !model["unk_token"].is_null()) unknown = model["unk_token"].get<std::string>();
    std::unique_ptr<Gpt2Tokenizer> t(new Gpt2Tokenizer());
    t->s_ = build_state(model.at("vocab"), merges, added, source, unknown, split, model.value("ignore_merges", false));
    return t;
  } catch (const json::exception& e) {
    throw DataError(source + ": not a tokenizer.json of a BPE model (" + std::string(e.what()) + ")");
  }
}

std::vector<std::int32_t> Gpt2Tokenizer::encode(const std::string& raw) const {
  const std::string text = valid_utf8(raw);
  std::vector<std::int32_t> out;
  // Where each special token next occurs, searched again only once passed (so many
  // occurrences of one cost no rescans of the text for the others).
  std::vector<std::size_t> next(s_->specials.size(), 0);
  for (std::size_t k = 0; k < next.size(); ++k) next[k] = text.find(s_->specials[k].first);
  std::size_t at = 0;
  while (at < text.size()) {
    // The earliest special token (the longest where two start together), else the rest.
    std::size_t found = std::string::npos;
    const std::pair<std::string, std::int32_t>* special = nullptr;
    for (std::size_t k = 0; k < next.size(); ++k) {
      if (next[k] != std::string::npos && next[k] < at) next[k] = text.find(s_->specials[k].first, at);
      if (next[k] < found) {
        found = next[k];
        special = &s_->specials[k];
      }
    }
    s_->encode_plain(std::string_view(text).substr(at, std::min(found, text.size()) - at), out);
    if (!special) break;
    out.push_back(special->second);
    at = found + special->first.size();
  }
  return out;
}

std::string Gpt2Tokenizer::decode(const std::vector<std::int32_t>& ids) const {
  std::string out;
  for (std::int32_t id : ids) {
    if (id >= 0 && static_cast<std::size_t>(id) < s_->bytes.size() && !s_->tokens[static_cast<std::size_t>(id)].empty())
      out += s_->bytes[static_cast<std::size_t>(id)];
    else
      out += "\xEF\xBF\xBD";  // U+FFFD for an id the vocabulary does not have
  }
  return out;
}

std::int64_t Gpt2Tokenizer::vocab_size() const { return static_cast<std::int64_t>(s_->tokens.size()); }

std::int32_t Gpt2Tokenizer::start_token() const { return std::max(s_->end_of_text, 0); }
std::int32_t Gpt2Tokenizer::end_token() const { return s_->end_of_text; }

std::string Gpt2Tokenizer::vocabulary() const {
  // A minimal tokenizer.json, which from_tokenizer_json reads back; ensure_ascii keeps it
  // printable.
  json vocab = json::object();
  std::vector<std::int32_t> special_ids;
  for (const auto& sp : s_->specials) special_ids.push_back(sp.second);
  json added = json::array();
  for (std::size_t id = 0; id < s_->tokens.size(); ++id) {
    if (s_->tokens[id].empty()) continue;
    if (std::find(special_ids.begin(), special_ids.end(), static_cast<std::int32_t>(id)) != special_ids.end())
      added.push_back({{"id", id}, {"content", s_->tokens[id]}, {"special", true}});
    else
      vocab[s_->tokens[id]] = id;
  }
  json merges = json::array();
  for (const auto& [a, b] : s_->merges) merges.push_back(a + " " + b);
  json model = {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}};
  if (!s_->unknown.empty()) model["unk_token"] = s_->unknown;
  if (s_->ignore_merges) model["ignore_merges"] = true;
  json pre = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  if (s_->split != kPattern)
    pre = {{"type", "Sequence"},
           {"pretokenizers",
            {{{"type", "Split"}, {"pattern", {{"Regex", s_->split}}}, {"behavior", "Isolated"}, {"invert", false}},
             {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  json doc = {{"model", model}, {"pre_tokenizer", pre}, {"added_tokens", added}};
  return doc.dump(-1, ' ', true);
}

std::string hf_tokenizer_json(const Tokenizer& tokenizer) {
  json doc;
  if (tokenizer.kind() == "gpt2") {
    doc = json::parse(tokenizer.vocabulary());
  } else if (tokenizer.kind() == "char") {
    // Each byte's stand-in character is its token; a byte the tokenizer never saw becomes
    // id 0, as CharTokenizer maps it.
    const auto cps = byte_code_points();
    json vocab = json::object();
    std::string first;
    for (std::int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
      const std::string byte = tokenizer.decode({id});
      std::string stand_in;
      append_utf8(stand_in, cps[static_cast<unsigned char>(byte.at(0))]);
      vocab[stand_in] = id;
      if (id == 0) first = stand_in;
    }
    doc = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}, {"unk_token", first}}},
           {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
           {"added_tokens", json::array()}};
  } else {
    throw DataError("a " + tokenizer.kind() + " tokenizer has no Hugging Face byte-level BPE form (char and gpt2 have; a "
                    "SentencePiece one is written as its tokenizer.model)");
  }
  doc["version"] = "1.0";
  doc["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  return doc.dump(2, ' ', true);
}

}  // namespace weft
