#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "weft/data/text.h"
#include "weft/util/error.h"
#include "weft/util/utf8.h"

using namespace weft;
using json = nlohmann::json;

namespace {

// GPT-2's stand-in character for byte b (bytes_to_unicode), as UTF-8.
std::string stand_in(int b) {
  int next = 256;
  for (int x = 0; x < 256; ++x) {
    const bool printable = (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF);
    const int cp = printable ? x : next++;
    if (x != b) continue;
    std::string s;
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    return s;
  }
  return {};
}

using Merges = std::vector<std::pair<std::string, std::string>>;

// The 256 byte tokens (ids 0..255 by byte value), each merge's token after them, then
// <|endoftext|> when asked.
struct Files {
  json vocab = json::object();
  std::string merges = "#version: 0.2\n";
  std::vector<std::pair<std::string, std::string>> pairs;
  explicit Files(Merges m, bool end_of_text = true) : pairs(std::move(m)) {
    for (int b = 0; b < 256; ++b) vocab[stand_in(b)] = b;
    for (const auto& [a, c] : pairs) {
      if (!vocab.contains(a + c)) vocab[a + c] = vocab.size();
      merges += a + " " + c + "\n";
    }
    if (end_of_text) vocab["<|endoftext|>"] = vocab.size();
  }
  std::unique_ptr<Gpt2Tokenizer> tokenizer() const { return Gpt2Tokenizer::from_files(vocab.dump(), merges, "test"); }
  std::int32_t id(const std::string& token) const { return vocab.at(token).get<std::int32_t>(); }
};

const std::string kSpace = stand_in(' ');  // "Ġ"

}  // namespace

TEST(Gpt2Tokenizer, MergesLowestRankFirstWithinWords) {
  Files f(Merges{{"h", "e"}, {"l", "l"}, {"he", "ll"}, {kSpace, "w"}, {"hell", "o"}, {"o", "r"}});
  auto t = f.tokenizer();
  EXPECT_EQ(t->vocab_size(), 256 + 6 + 1);
  EXPECT_EQ(t->encode("hello world"),
            (std::vector<std::int32_t>{f.id("hello"), f.id(kSpace + "w"), f.id("or"), 'l', 'd'}));
  EXPECT_EQ(t->decode(t->encode("hello world")), "hello world");
  // The rank decides between overlapping pairs.
  Files ab(Merges{{"a", "b"}, {"b", "c"}}), bc({{"b", "c"}, {"a", "b"}});
  EXPECT_EQ(ab.tokenizer()->encode("abc"), (std::vector<std::int32_t>{ab.id("ab"), 'c'}));
  EXPECT_EQ(bc.tokenizer()->encode("abc"), (std::vector<std::int32_t>{'a', bc.id("bc")}));
  // A pair merges left to right where occurrences overlap.
  Files aa(Merges{{"a", "a"}});
  EXPECT_EQ(aa.tokenizer()->encode("aaa"), (std::vector<std::int32_t>{aa.id("aa"), 'a'}));
  EXPECT_EQ(aa.tokenizer()->encode("aaaa"), (std::vector<std::int32_t>{aa.id("aa"), aa.id("aa")}));
}

// GPT-2's pieces (a space before a word, runs of spaces, numbers, punctuation) never span
// the cuts of a corpus encoded in pieces: the whole text's tokens.
TEST(Gpt2Tokenizer, ACorpusInPiecesGivesTheWholeTextsTokens) {
  Files f(Merges{{kSpace, "t"}, {kSpace + "t", "h"}, {kSpace + "th", "e"}, {"o", "n"}, {kSpace, kSpace}, {"1", "2"}});
  auto t = f.tokenizer();
  std::string corpus;
  for (int i = 0; i < 100; ++i)
    corpus += "the one  then\t 12 the's, won't!! " + std::to_string(i * 13) + "\n\n   the\nend " + std::string(static_cast<std::size_t>(i % 3), ' ');
  const std::vector<std::int32_t> whole = t->encode(corpus);
  for (std::size_t piece : {1, 5, 64, 1000})
    EXPECT_EQ(encode_corpus(*t, corpus, 0, "c.txt", piece), whole) << "pieces of " << piece;
}

TEST(Gpt2Tokenizer, SplitsWordsByGpt2sPattern) {
  // No merge crosses a word: "t" + " " never merges, as " x" is its own word; a run of
  // spaces leaves its last one to the next word; contractions split off.
  Files f(Merges{{"t", kSpace}, {kSpace, kSpace}, {kSpace, "b"}, {"'", "s"}, {"i", "t"}});
  auto t = f.tokenizer();
  EXPECT_EQ(t->encode("at x"), (std::vector<std::int32_t>{'a', 't', f.id(kSpace), 'x'}));
  EXPECT_EQ(t->encode("a   b"), (std::vector<std::int32_t>{'a', f.id(kSpace + kSpace), f.id(kSpace + "b")}));
  EXPECT_EQ(t->encode("it's"), (std::vector<std::int32_t>{f.id("it"), f.id("'s")}));
  // Letters, digits and other symbols are separate words: "it" does not merge inside "1it".
  EXPECT_EQ(t->encode("1it"), (std::vector<std::int32_t>{'1', f.id("it")}));
}

TEST(Gpt2Tokenizer, RoundTripsAnyTextAndReadsBadBytesAsReplacement) {
  Files f(Merges{{"e", "r"}, {kSpace, "t"}, {stand_in(0xC3), stand_in(0xA9)}});
  auto t = f.tokenizer();
  std::mt19937 rng(7);
  const std::vector<std::string> pieces = {"a", "é", " ", "  ", "\n", "日本", "'s", "3", "—", "x", "\t", "ü", "🙂"};
  for (int i = 0; i < 200; ++i) {
    std::string s;
    for (int k = 0; k < 12; ++k) s += pieces[rng() % pieces.size()];
    ASSERT_EQ(t->decode(t->encode(s)), s);
  }
  EXPECT_EQ(t->decode(t->encode("a\xff" "b")), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(t->decode({9999}), "\xEF\xBF\xBD");
}

TEST(Gpt2Tokenizer, EndOfTextIsSpecialAndStartsAndEnds) {
  Files f(Merges{{"a", "b"}});
  auto t = f.tokenizer();
  const std::int32_t eot = f.id("<|endoftext|>");
  EXPECT_EQ(t->encode("ab<|endoftext|>b"), (std::vector<std::int32_t>{f.id("ab"), eot, 'b'}));
  EXPECT_EQ(t->start_token(), eot);
  EXPECT_EQ(t->end_token(), eot);
  Files plain(Merges{{"a", "b"}}, false);
  EXPECT_EQ(plain.tokenizer()->end_token(), -1);
  EXPECT_EQ(plain.tokenizer()->start_token(), 0);
}

TEST(Gpt2Tokenizer, VocabularyTextMakesTheSameTokenizer) {
  Files f(Merges{{"h", "e"}, {"l", "l"}, {"he", "ll"}, {kSpace, "w"}});
  auto t = f.tokenizer();
  const std::string v = t->vocabulary();
  for (char c : v) ASSERT_TRUE(c >= 0x20 && c < 0x7F) << "not printable ASCII";
  auto again = make_tokenizer("gpt2", v);
  EXPECT_EQ(again->kind(), "gpt2");
  EXPECT_EQ(again->vocab_size(), t->vocab_size());
  for (const std::string s : {"hello world", "héllo\n<|endoftext|> w", ""}) EXPECT_EQ(again->encode(s), t->encode(s));
  EXPECT_EQ(again->end_token(), t->end_token());
}

TEST(Gpt2Tokenizer, ReadsTokenizerJson) {
  Files f(Merges{{"h", "e"}, {"he", "l"}}, false);
  json doc = {{"model", {{"type", "BPE"}, {"vocab", f.vocab}, {"merges", {"h e", json::array({"he", "l"})}}}},
              {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
              {"added_tokens", {{{"id", 300}, {"content", "<|endoftext|>"}, {"special", true}}}}};
  auto t = Gpt2Tokenizer::from_tokenizer_json(doc.dump(), "tokenizer.json");
  EXPECT_EQ(t->encode("hel<|endoftext|>"), (std::vector<std::int32_t>{f.id("hel"), 300}));
  doc["pre_tokenizer"] = {{"type", "Metaspace"}};
  EXPECT_THROW(Gpt2Tokenizer::from_tokenizer_json(doc.dump(), "tokenizer.json"), DataError);
}

TEST(Gpt2Tokenizer, LongWordsEncodeWithoutQuadraticWork) {
  Files f(Merges{{"a", "a"}, {"aa", "aa"}, {kSpace, kSpace}});
  auto t = f.tokenizer();
  const auto ids = t->encode(std::string(200000, 'a'));
  EXPECT_EQ(ids.size(), 50000u);
  EXPECT_EQ(t->decode(t->encode(std::string(100000, ' ') + "x")), std::string(100000, ' ') + "x");
}

TEST(Gpt2Tokenizer, MalformedFilesAreNamedDataErrors) {
  Files good(Merges{{"a", "b"}});
  auto expect_error = [](const std::string& vocab, const std::string& merges, const std::string& what) {
    try {
      Gpt2Tokenizer::from_files(vocab, merges, "files");
      ADD_FAILURE() << "no error for " << what;
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect_error("{not json", good.merges, "vocab.json is not valid JSON");
  expect_error(good.vocab.dump(), "a b c\n", "merges.txt line 1 is not two tokens");
  expect_error(good.vocab.dump(), "a zz\n", "merge 1 (a zz): 'zz' is not in the vocabulary");
  json no_byte = good.vocab;
  no_byte.erase(stand_in(0));
  expect_error(no_byte.dump(), good.merges, "the token of byte 0");
  json twice = good.vocab;
  twice["ab"] = 3;
  expect_error(twice.dump(), good.merges, "id 3 is given to two tokens");
  json huge = good.vocab;
  huge["zz"] = 16000000;
  expect_error(huge.dump(), good.merges, "the ids go up to 16000000");
  json negative = good.vocab;
  negative["zz"] = -1;
  expect_error(negative.dump(), good.merges, "has id -1");
  expect_error("[1, 2]", good.merges, "not a JSON object");
  EXPECT_THROW(make_tokenizer("gpt2", "{}"), DataError);
}

TEST(Gpt2Tokenizer, SeveralSpecialTokensInterleaved) {
  Files f(Merges{{"a", "b"}}, false);
  json doc = {{"model", {{"type", "BPE"}, {"vocab", f.vocab}, {"merges", {"a b"}}}},
              {"pre_tokenizer", {{"type", "ByteLevel"}}},
              {"added_tokens", {{{"id", 300}, {"content", "<|endoftext|>"}}, {{"id", 301}, {"content", "<|x|>"}},
                                {{"id", 302}, {"content", "<|x|>y"}}}}};
  auto t = Gpt2Tokenizer::from_tokenizer_json(doc.dump(), "tokenizer.json");
  // The earliest special wins; of two starting together, the longer.
  EXPECT_EQ(t->encode("ab<|x|>a<|endoftext|><|x|>y<|x|>ab<|x|>"),
            (std::vector<std::int32_t>{f.id("ab"), 301, 'a', 300, 302, 301, f.id("ab"), 301}));
  for (std::int32_t id : t->encode("no <|specials|> here")) EXPECT_LT(id, 300);
  EXPECT_EQ(t->decode(t->encode("ab<|x|>a<|endoftext|>")), "ab<|x|>a<|endoftext|>");
}

// A character tokenizer as a Hugging Face tokenizer.json reads back as a byte-level BPE that
// gives the same ids for any text (a byte it never saw: the unk_token, id 0, as before) and
// decodes them to the same bytes; a gpt2 tokenizer's own comes back whole; a word tokenizer
// has no such form.
TEST(HfTokenizerJson, CharTokenizerRoundTripsTokenForToken) {
  const CharTokenizer chars("The cat sat on the mat.\nA dog, too! 42");
  auto back = Gpt2Tokenizer::from_tokenizer_json(hf_tokenizer_json(chars), "tokenizer.json");
  EXPECT_EQ(back->vocab_size(), chars.vocab_size());
  for (const std::string text : {"The mat.", "  tac ehT\n\n", "A cat, 24 dogs!", "zqx~ unseen bytes", ""}) {
    EXPECT_EQ(back->encode(text), chars.encode(text)) << text;
    EXPECT_EQ(back->decode(chars.encode(text)), chars.decode(chars.encode(text))) << text;
  }
  const auto gpt2 = Gpt2Tokenizer::from_tokenizer_json(hf_tokenizer_json(*back), "again");
  EXPECT_EQ(gpt2->encode("The dog sat."), back->encode("The dog sat."));
  EXPECT_THROW(hf_tokenizer_json(WordTokenizer("the cat sat")), DataError);
  // An unk_token the vocabulary lacks is a named error.
  nlohmann::json doc = nlohmann::json::parse(hf_tokenizer_json(chars));
  doc["model"]["unk_token"] = "<unk>";
  EXPECT_THROW(Gpt2Tokenizer::from_tokenizer_json(doc.dump(), "t"), DataError);
}
