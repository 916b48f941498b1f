#include "weft/data/text.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "weft/util/base64.h"
#include "weft/util/error.h"
#include "weft/util/file.h"
#include "weft/util/units.h"

namespace weft {

namespace fs = std::filesystem;

namespace {

// A file's text in place: fortune's separator lines ("%") emptied, every line (the last too,
// after a final newline an empty one) followed by a newline.
void lines_in_place(std::string& raw) {
  std::size_t w = 0, at = 0;
  for (;;) {
    const std::size_t nl = raw.find('\n', at);
    const std::size_t len = (nl == std::string::npos ? raw.size() : nl) - at;
    if (!(len == 1 && raw[at] == '%')) {
      if (w != at) std::memmove(raw.data() + w, raw.data() + at, len);
      w += len;
    }
    if (nl == std::string::npos) break;
    raw[w++] = '\n';  // (w <= nl)
    at = nl + 1;
  }
  raw.resize(w);
  raw += '\n';
}

}  // namespace

std::string load_corpus(const std::string& path_in, std::size_t memory_budget) {
  const std::string path = path_in == "fortunes" ? std::string(kFortunesDir) : path_in;
  if (!file_exists(path)) {
    throw DataError(path + " does not exist" +
                    (path_in == "fortunes" ? std::string(" (install the Debian package fortunes, or pass --data PATH)") : ""));
  }
  std::vector<std::string> files;
  if (is_directory(path)) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(path, ec)) {
      const std::string name = e.path().filename().string();
      auto ends = [&](const char* s) { return name.size() > std::strlen(s) && name.compare(name.size() - std::strlen(s), std::strlen(s), s) == 0; };
      if (e.is_regular_file() && !ends(".dat") && !ends(".u8") && name[0] != '.') files.push_back(e.path().string());
    }
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(path);
  }
  // One reservation for all the files (growing it file by file copied the text each time:
  // 43 reallocations for the fortunes, most of a small run's set-up).
  std::size_t total = 0;
  for (const auto& f : files) {
    std::error_code ec;
    const auto size = fs::file_size(f, ec);
    if (!ec) total += static_cast<std::size_t>(size) + 1;
  }
  if (memory_budget > 0 && total > memory_budget)
    throw DataError(fmt::format("{}: {} of text, more than the {} of memory available to hold it", path,
                                human_bytes(static_cast<std::int64_t>(total)),
                                human_bytes(static_cast<std::int64_t>(memory_budget))));
  std::string text;
  if (files.size() > 1) text.reserve(total);
  for (const auto& f : files) {
    std::string raw = read_file(f);
    // Text has no NUL byte; a binary file (a program, an archive, an index) trained on as
    // characters is a silent wrong result.
    if (const std::size_t nul = raw.find('\0'); nul != std::string::npos)
      throw DataError(f + ": not text (a NUL byte at offset " + std::to_string(nul) + "): a corpus is text files" +
                      (files.size() > 1 ? ", remove it from the folder" : ""));
    lines_in_place(raw);  // (one file's text is not copied: a corpus the size of the memory reads)
    if (files.size() == 1) text = std::move(raw);
    else text += raw;
  }
  if (text.find_first_not_of(" \n\t") == std::string::npos) throw DataError(path + ": no text");
  return text;
}

CharTokenizer::CharTokenizer(const std::string& text) {
  bool seen[256] = {};
  for (unsigned char c : text) seen[c] = true;
  for (int c = 0; c < 256; ++c) {
    index_[c] = -1;
    if (seen[c]) {
      index_[c] = static_cast<std::int32_t>(chars_.size());
      chars_.push_back(static_cast<char>(c));
    }
  }
  if (chars_.empty()) throw DataError("cannot build a tokenizer from empty text");
}

std::vector<std::int32_t> CharTokenizer::encode(const std::string& text) const {
  std::vector<std::int32_t> out(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) out[i] = std::max(index_[static_cast<unsigned char>(text[i])], 0);
  return out;
}

std::string CharTokenizer::decode(const std::vector<std::int32_t>& ids) const {
  std::string s;
  for (auto id : ids) s.push_back(id >= 0 && id < vocab_size() ? chars_[static_cast<size_t>(id)] : '?');
  return s;
}

void WordTokenizer::for_each_piece(std::string_view text, const std::function<void(std::string_view)>& fn) {
  std::string word;
  auto flush = [&] {
    if (!word.empty()) fn(word);
    word.clear();
  };
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '\'') {
      word.push_back(static_cast<char>(std::tolower(c)));
    } else {
      flush();
      if (c == '\n' || !std::isspace(c)) {
        const char piece = static_cast<char>(c);
        fn(std::string_view(&piece, 1));
      }
    }
  }
  flush();
}

std::vector<std::string> WordTokenizer::split(std::string_view text) {
  std::vector<std::string> out;
  for_each_piece(text, [&](std::string_view piece) { out.emplace_back(piece); });
  return out;
}

WordTokenizer::WordTokenizer(const std::string& text, std::int64_t max_vocab) {
  if (max_vocab < 3) throw ConfigError("a word vocabulary needs at least 3 entries");
  words_ = {"<pad>", "<unk>"};
  std::map<std::string, std::int64_t, std::less<>> count;
  std::vector<std::string> order;
  for_each_piece(text, [&](std::string_view w) {
    if (auto it = count.find(w); it != count.end()) {
      ++it->second;
    } else {
      count.emplace(w, 1);
      order.emplace_back(w);
    }
  });
  // Keep the most frequent (ties: first appearance), then number them by first appearance.
  std::vector<std::string> by_freq = order;
  std::stable_sort(by_freq.begin(), by_freq.end(), [&](const auto& a, const auto& b) { return count.at(a) > count.at(b); });
  if (static_cast<std::int64_t>(by_freq.size()) > max_vocab - 2) by_freq.resize(static_cast<size_t>(max_vocab - 2));
  std::map<std::string, bool> keep;
  for (const auto& w : by_freq) keep[w] = true;
  for (const auto& w : order) {
    if (!keep.count(w)) continue;
    ids_[w] = static_cast<std::int32_t>(words_.size());
    words_.push_back(w);
  }
}

std::vector<std::int32_t> WordTokenizer::encode(const std::string& text) const {
  std::vector<std::int32_t> out;
  for_each_piece(text, [&](std::string_view w) {
    auto it = ids_.find(w);
    out.push_back(it == ids_.end() ? 1 : it->second);
  });
  return out;
}

std::string WordTokenizer::decode(const std::vector<std::int32_t>& ids) const {
  std::string s;
  for (auto id : ids) {
    const std::string& w = id >= 0 && id < vocab_size() ? words_[static_cast<size_t>(id)] : words_[1];
    if (!s.empty() && s.back() != '\n' && w != "\n" && !(w.size() == 1 && std::ispunct(static_cast<unsigned char>(w[0])))) s += ' ';
    s += w;
  }
  return s;
}

std::vector<std::int32_t> encode_corpus(const Tokenizer& tokenizer, std::string_view text, std::size_t budget_bytes,
                                        const std::string& path, std::size_t piece_bytes) {
  const auto is_space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  std::vector<std::int32_t> ids;
  const auto refuse = [&](std::size_t at) {
    return DataError(fmt::format("{}: its tokens would pass the {} of memory available to them ({:.1f} million from the "
                                 "first {:.0f}% of its {} of text): give a smaller corpus",
                                 path, human_bytes(static_cast<std::int64_t>(budget_bytes)),
                                 static_cast<double>(ids.size()) / 1e6,
                                 100.0 * static_cast<double>(at) / static_cast<double>(text.size()),
                                 human_bytes(static_cast<std::int64_t>(text.size()))));
  };
  for (std::size_t at = 0; at < text.size();) {
    std::size_t end = std::min(text.size(), at + std::max<std::size_t>(piece_bytes, 1));
    while (end < text.size() && !(text[end] == ' ' && !is_space(text[end - 1]) && end + 1 < text.size() &&
                                  !is_space(text[end + 1])))
      ++end;
    const std::vector<std::int32_t> piece = tokenizer.encode(std::string(text.substr(at, end - at)));
    if (const std::size_t need = ids.size() + piece.size(); need > ids.capacity()) {
      // Room for the rest at the rate so far (and a twentieth more), within the budget; the
      // old and the new block live together while the ids move.
      const double rate = static_cast<double>(need) / static_cast<double>(end);
      std::size_t want = need + static_cast<std::size_t>(rate * 1.05 * static_cast<double>(text.size() - end)) + 1024;
      if (budget_bytes > 0) {
        const std::size_t room = budget_bytes / sizeof(std::int32_t);
        if (need + ids.capacity() > room) throw refuse(at);
        want = std::min(want, room - ids.capacity());
      }
      ids.reserve(std::max(want, need));
    }
    ids.insert(ids.end(), piece.begin(), piece.end());
    at = end;
  }
  return ids;
}

std::size_t ids_budget(std::size_t budget, std::size_t text_bytes) {
  if (budget == 0) return 0;
  return budget > text_bytes ? (budget - text_bytes) / 11 * 10 : 1;
}

TokenSplit split_tokens(std::vector<std::int32_t> all) {
  const auto split = static_cast<std::ptrdiff_t>(all.size() * 9 / 10);
  std::vector<std::int32_t> validation(all.begin() + split, all.end());
  all.resize(static_cast<std::size_t>(split));
  return {std::move(all), std::move(validation)};
}

std::vector<std::int64_t> spread_windows(std::int64_t tokens, std::int64_t context, std::int64_t n) {
  const std::int64_t span = tokens - context - 1;
  std::vector<std::int64_t> starts;
  for (std::int64_t i = 0; i < n; ++i) starts.push_back(span * i / n);
  return starts;
}

double unigram_entropy(const std::vector<std::int32_t>& tokens, std::int64_t vocab) {
  std::vector<std::int64_t> count(static_cast<size_t>(std::max<std::int64_t>(vocab, 1)), 0);
  for (auto t : tokens)
    if (t >= 0 && t < vocab) ++count[static_cast<size_t>(t)];
  const double n = static_cast<double>(tokens.size());
  double h = 0;
  for (const std::int64_t c : count)
    if (c > 0) h -= static_cast<double>(c) / n * std::log(static_cast<double>(c) / n);
  return h;
}

}  // namespace weft

namespace weft {

namespace {
constexpr char kHex[] = "0123456789abcdef";

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}
}  // namespace

std::string CharTokenizer::vocabulary() const {
  std::string hex;
  for (char c : chars_) {
    const auto b = static_cast<unsigned char>(c);
    hex += kHex[b >> 4];
    hex += kHex[b & 15];
  }
  return hex;
}

// Words one per line in ASCII: a newline is written \n, a backslash \\, any other byte
// outside printable ASCII \xHH (a word may hold bytes that are not UTF-8, and the text goes
// into JSON).
std::string WordTokenizer::vocabulary() const {
  std::string text;
  for (const std::string& w : words_) {
    if (!text.empty()) text += '\n';
    for (char ch : w) {
      const auto b = static_cast<unsigned char>(ch);
      if (ch == '\n') text += "\\n";
      else if (ch == '\\') text += "\\\\";
      else if (b < 0x20 || b >= 0x7F) text += std::string("\\x") + kHex[b >> 4] + kHex[b & 15];
      else text += ch;
    }
  }
  return text;
}

std::unique_ptr<WordTokenizer> WordTokenizer::from_words(std::vector<std::string> words) {
  std::unique_ptr<WordTokenizer> t(new WordTokenizer());
  for (std::size_t i = 0; i < words.size(); ++i) {
    if (!t->ids_.emplace(words[i], static_cast<std::int32_t>(i)).second)
      throw DataError("word vocabulary: '" + words[i] + "' appears twice");
  }
  t->words_ = std::move(words);
  return t;
}

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& kind, const std::string& vocabulary) {
  if (kind == "char") {
    if (vocabulary.empty() || vocabulary.size() % 2 != 0)
      throw DataError("character vocabulary: expected an even number of hex digits");
    std::string bytes;
    for (std::size_t i = 0; i < vocabulary.size(); i += 2) {
      const int hi = hex_value(vocabulary[i]), lo = hex_value(vocabulary[i + 1]);
      if (hi < 0 || lo < 0) throw DataError("character vocabulary: '" + vocabulary.substr(i, 2) + "' is not a hex byte");
      const auto b = static_cast<char>(hi * 16 + lo);
      if (!bytes.empty() && static_cast<unsigned char>(b) <= static_cast<unsigned char>(bytes.back()))
        throw DataError("character vocabulary: the bytes are not in increasing order");
      bytes += b;
    }
    return std::make_unique<CharTokenizer>(bytes);
  }
  if (kind == "word") {
    std::vector<std::string> words;
    std::size_t begin = 0;
    while (begin <= vocabulary.size()) {
      std::size_t end = vocabulary.find('\n', begin);
      if (end == std::string::npos) end = vocabulary.size();
      const std::string line = vocabulary.substr(begin, end - begin);
      std::string w;
      for (std::size_t i = 0; i < line.size(); ++i) {
        if (line[i] != '\\') {
          w += line[i];
          continue;
        }
        const char e = i + 1 < line.size() ? line[i + 1] : '\0';
        if (e == 'n' || e == '\\') {
          w += e == 'n' ? '\n' : '\\';
          ++i;
        } else if (e == 'x' && i + 3 < line.size() && hex_value(line[i + 2]) >= 0 && hex_value(line[i + 3]) >= 0) {
          w += static_cast<char>(hex_value(line[i + 2]) * 16 + hex_value(line[i + 3]));
          i += 3;
        } else {
          throw DataError("word vocabulary: a bad escape in '" + line + "'");
        }
      }
      if (w.empty()) throw DataError("word vocabulary: an empty word");
      words.push_back(std::move(w));
      begin = end + 1;
    }
    if (words.size() < 3 || words[0] != "<pad>" || words[1] != "<unk>")
      throw DataError("word vocabulary: must start with <pad> and <unk> and have at least one word");
    return WordTokenizer::from_words(std::move(words));
  }
  if (kind == "bpe") {
    const auto model = base64_decode(vocabulary);
    if (!model) throw DataError("bpe vocabulary: not base64");
    return BpeTokenizer::load(*model, "bpe vocabulary");
  }
  if (kind == "gpt2") return Gpt2Tokenizer::from_tokenizer_json(vocabulary, "gpt2 vocabulary");
  throw DataError("unknown tokenizer '" + kind + "' (known: char, word, bpe, gpt2)");
}

}  // namespace weft
