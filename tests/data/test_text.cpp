#include <gtest/gtest.h>

#include <cmath>

#include "../test_support.h"
#include "weft/data/text.h"
#include "weft/util/error.h"
#include "weft/util/file.h"

using namespace weft;
using weft::testing::TempDir;

TEST(CharTokenizer, SortedVocabularyLikeTheSeed) {
  // Seed 002 chapter 5: "alley" has 4 characters, a = 0, e = 1, l = 2, y = 3.
  CharTokenizer tok("alley");
  EXPECT_EQ(tok.vocab_size(), 4);
  EXPECT_EQ(tok.encode("alley"), (std::vector<std::int32_t>{0, 2, 2, 1, 3}));
  EXPECT_EQ(tok.decode({3, 1, 2, 2, 0}), "yella");
  EXPECT_EQ(tok.encode("z"), (std::vector<std::int32_t>{0}));  // never seen: the first token
}

TEST(WordTokenizer, PadUnknownAndFirstAppearance) {
  WordTokenizer tok("The cat sat. the CAT ran!");
  // 0 <pad>, 1 <unk>, then the, cat, sat, ., ran, !
  EXPECT_EQ(tok.vocab_size(), 8);
  EXPECT_EQ(tok.encode("the cat ran."), (std::vector<std::int32_t>{2, 3, 6, 5}));
  EXPECT_EQ(tok.encode("a dog"), (std::vector<std::int32_t>{1, 1}));
  EXPECT_EQ(tok.decode({2, 3, 4, 5}), "the cat sat.");
}

TEST(WordTokenizer, KeepsTheMostFrequentWords) {
  WordTokenizer tok("b a a c c c", 4);  // room for two words: c (3) and a (2), numbered by first appearance
  EXPECT_EQ(tok.vocab_size(), 4);
  EXPECT_EQ(tok.encode("a b c"), (std::vector<std::int32_t>{2, 1, 3}));
  EXPECT_THROW(WordTokenizer("x", 2), ConfigError);
}

TEST(WordTokenizer, SplitsWordsPunctuationAndLines) {
  EXPECT_EQ(WordTokenizer::split("Don't panic!\nOK"),
            (std::vector<std::string>{"don't", "panic", "!", "\n", "ok"}));
}

TEST(UnigramEntropy, MatchesTheFormula) {
  EXPECT_NEAR(unigram_entropy({0, 1, 0, 1}, 2), std::log(2.0), 1e-12);
  EXPECT_NEAR(unigram_entropy({0, 0, 0, 0}, 3), 0.0, 1e-12);
  EXPECT_NEAR(unigram_entropy({0, 1, 2, 2}, 3), -(0.25 * std::log(0.25) * 2 + 0.5 * std::log(0.5)), 1e-12);
}

TEST(Corpus, FolderSkipsIndexFilesAndFortuneSeparators) {
  TempDir dir;
  write_file_atomic(dir / "b", "second\n");
  write_file_atomic(dir / "a", "one\n%\ntwo\n");
  write_file_atomic(dir / "a.dat", std::string("\x01\x02", 2));
  write_file_atomic(dir / "a.u8", "one\n");
  EXPECT_EQ(load_corpus(dir.path()), "one\n\ntwo\n\nsecond\n\n");
}

TEST(Corpus, MissingOrEmptyIsADataError) {
  TempDir dir;
  EXPECT_THROW(load_corpus(dir / "nothing"), DataError);
  write_file_atomic(dir / "blank", " \n\n");
  EXPECT_THROW(load_corpus(dir / "blank"), DataError);
}

// A binary file (a NUL byte: a program or an archive left in the folder) is refused, naming
// the file and the byte's offset, not trained on as characters; the index files skipped
// still are (fortune's *.dat hold NULs).
TEST(Corpus, AFileWithANulByteIsNotText) {
  TempDir dir;
  write_file_atomic(dir / "a", "one\n");
  write_file_atomic(dir / "a.dat", std::string("\0\0\x02", 3));
  EXPECT_EQ(load_corpus(dir.path()), "one\n\n");
  write_file_atomic(dir / "prog", std::string("\x7f" "ELF\x02\x01\x01\0rest", 12));
  for (const std::string& path : {dir.path(), dir / "prog"}) {
    try {
      load_corpus(path);
      FAIL() << path << " was read as text";
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find(dir / "prog" + ": not text (a NUL byte at offset 7)"), std::string::npos) << e.what();
    }
  }
}

// SentencePiece BPE: text comes back as written (no normalization), bytes the corpus never
// had still encode (byte fallback), the vocabulary round-trips through its base64 text, and
// a file that is not a model is refused by name.
TEST(BpeTokenizer, RoundTripsAnyTextAndItsVocabulary) {
  std::string corpus;
  for (int i = 0; i < 200; ++i)
    corpus += "the quick brown fox jumps over the lazy dog " + std::to_string(i) + "\nΚαλημέρα κόσμε, grüße\n";
  auto bpe = BpeTokenizer::train(corpus, 600);
  EXPECT_GT(bpe->vocab_size(), 256);
  EXPECT_LE(bpe->vocab_size(), 600);
  for (const std::string& text : {std::string("the lazy fox"), std::string("  two  spaces\tand a tab"),
                                 std::string("unseen: ü€ 日本 \x01"), std::string("Καλημέρα")}) {
    const auto ids = bpe->encode(text);
    EXPECT_EQ(bpe->decode(ids), text);
    for (auto id : ids) EXPECT_LT(id, bpe->vocab_size());
  }
  EXPECT_LT(bpe->encode("the quick brown fox").size(), std::string("the quick brown fox").size());  // pieces, not bytes
  auto again = make_tokenizer("bpe", bpe->vocabulary());
  EXPECT_EQ(again->vocab_size(), bpe->vocab_size());
  EXPECT_EQ(again->encode("the quick brown fox 12"), bpe->encode("the quick brown fox 12"));
  EXPECT_EQ(BpeTokenizer::train(corpus, 600)->vocabulary(), bpe->vocabulary());
  EXPECT_THROW(BpeTokenizer::train(corpus, 100), DataError);  // fewer than the 256 byte pieces  // the same corpus, the same pieces
  EXPECT_THROW(BpeTokenizer::load("not a model", "x.model"), DataError);
  EXPECT_THROW(make_tokenizer("bpe", "!!!"), DataError);
}

// A corpus encoded in pieces gives the whole text's tokens with every tokenizer, whatever the
// pieces' size (cuts before a space between two other characters only: runs of spaces, tabs
// and lines stay whole), and ids past the budget are refused by the corpus's name.
TEST(EncodeCorpus, PiecesGiveTheWholeTextsTokens) {
  std::string corpus;
  for (int i = 0; i < 150; ++i)
    corpus += "The quick brown fox, " + std::to_string(i * 37) + " jumps  over\tthe lazy dog.\n\n  Καλημέρα κόσμε! " +
              "grüße \n" + (i % 7 == 0 ? "%\n" : "") + "don't stop" + std::string(static_cast<std::size_t>(i % 4), ' ');
  std::vector<std::unique_ptr<Tokenizer>> tokenizers;
  tokenizers.push_back(std::make_unique<CharTokenizer>(corpus));
  tokenizers.push_back(std::make_unique<WordTokenizer>(corpus, 40));
  tokenizers.push_back(BpeTokenizer::train(corpus, 400));
  for (const auto& t : tokenizers) {
    const std::vector<std::int32_t> whole = t->encode(corpus);
    for (std::size_t piece : {1, 7, 64, 1000, 1 << 20})
      EXPECT_EQ(encode_corpus(*t, corpus, 0, "c.txt", piece), whole) << t->kind() << ", pieces of " << piece;
    // A budget the ids fit: taken; one they pass: refused before they are.
    EXPECT_EQ(encode_corpus(*t, corpus, whole.size() * 8, "c.txt", 64), whole) << t->kind();
    try {
      encode_corpus(*t, corpus, whole.size() * 2, "c.txt", 64);
      ADD_FAILURE() << t->kind() << ": ids of " << whole.size() * 4 << " bytes taken within " << whole.size() * 2;
    } catch (const DataError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("c.txt: its tokens would pass the ", 0), 0u) << e.what();
      EXPECT_NE(std::string(e.what()).find("give a smaller corpus"), std::string::npos) << e.what();
    }
  }
}

// Lines past what SentencePiece's trainer takes: a line of 40,000 of one character (which
// overflowed its index of a symbol past 32,767 and crashed it) and a corpus without a line
// break (every line skipped: "nothing to train on") are trained on in pieces; multi-byte
// characters stay whole at the cuts.
TEST(BpeTokenizer, TrainsOnLinesLongerThanTheTrainerTakes) {
  for (const std::string& corpus : {std::string(40000, 'a') + "\n" + std::string(40000, 'a') + "\nab ab\n",
                                    [] {
                                      std::string t;
                                      while (t.size() < 150000) t += "ü日 words and more words ";
                                      return t;
                                    }()}) {
    auto bpe = BpeTokenizer::train(corpus, 300);
    EXPECT_GT(bpe->vocab_size(), 256);
    const std::string probe = corpus.substr(0, 64);
    EXPECT_EQ(bpe->decode(bpe->encode(probe)), probe);
    EXPECT_LT(bpe->encode(probe).size(), probe.size());  // pieces were learned
  }
}
