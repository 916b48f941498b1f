// Text for language models: a corpus (a file, a folder of files, or the Debian fortunes),
// and the tokenizers: characters, words, SentencePiece BPE and GPT-2's byte-level BPE.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace weft {

// Where the Debian package `fortunes` installs its text.
inline constexpr const char* kFortunesDir = "/usr/share/games/fortunes";

// "fortunes" means the Debian package's folder. A folder contributes every regular file in it
// (sorted by name) except fortune's index files (*.dat) and UTF-8 duplicates (*.u8); lines
// that are only "%" (fortune separators) become blank lines. Throws DataError naming the
// path when it is missing, unreadable or empty, and naming a file that holds a NUL byte (not
// text: a program or an archive left in the folder) with the byte's offset.
// `memory_budget` (bytes, 0: none): a corpus larger is refused (DataError) before it is read.
std::string load_corpus(const std::string& path, std::size_t memory_budget = 0);

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<std::int32_t> encode(const std::string& text) const = 0;
  virtual std::string decode(const std::vector<std::int32_t>& ids) const = 0;
  virtual std::int64_t vocab_size() const = 0;
  virtual std::string kind() const = 0;  // "char" | "word" | "bpe" | "gpt2"
  // The vocabulary as text, which make_tokenizer turns back into the same tokenizer: a saved
  // model carries it, in printable ASCII (char: the bytes in hex, in token order; word: one
  // word per line, a newline written as backslash-n, a backslash as two, and any other byte
  // outside printable ASCII as backslash-x and two hex digits).
  virtual std::string vocabulary() const = 0;
  // The token generation starts from when the prompt is empty, and the token that ends a
  // text (-1: none; generation then stops at its length or a stop sequence).
  virtual std::int32_t start_token() const { return 0; }
  virtual std::int32_t end_token() const { return -1; }
};

// The tokenizer of `kind` with a vocabulary written by Tokenizer::vocabulary(); throws
// DataError naming the problem when the text is not one.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& kind, const std::string& vocabulary);

// One token per byte value seen in the training text, in sorted order (seed 002 chapter 5's
// "alley": a=0, e=1, l=2, y=3). Bytes never seen map to the first token.
class CharTokenizer : public Tokenizer {
 public:
  explicit CharTokenizer(const std::string& text);
  std::vector<std::int32_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<std::int32_t>& ids) const override;
  std::int64_t vocab_size() const override { return static_cast<std::int64_t>(chars_.size()); }
  std::string kind() const override { return "char"; }
  std::string vocabulary() const override;

 private:
  std::vector<char> chars_;
  std::int32_t index_[256];
};

// Lower-cased words and single punctuation marks; 0 = padding, 1 = unknown, then the words
// in order of first appearance (seed 002 chapter 7), keeping the `max_vocab` most frequent.
class WordTokenizer : public Tokenizer {
 public:
  WordTokenizer(const std::string& text, std::int64_t max_vocab = 10000);
  std::vector<std::int32_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<std::int32_t>& ids) const override;
  std::int64_t vocab_size() const override { return static_cast<std::int64_t>(words_.size()); }
  std::string kind() const override { return "word"; }
  std::string vocabulary() const override;
  // The pieces the tokenizer reads, in order (a word lower-cased, a newline, a punctuation
  // mark), each handed to `fn` as it is found: a corpus of any size in no more memory than
  // its longest word (a piece's view lasts until the next call).
  static void for_each_piece(std::string_view text, const std::function<void(std::string_view)>& fn);
  static std::vector<std::string> split(std::string_view text);  // the pieces, collected
  // The tokenizer with exactly these words (ids in order; the first two are <pad>, <unk>).
  static std::unique_ptr<WordTokenizer> from_words(std::vector<std::string> words);

 private:
  WordTokenizer() = default;
  std::vector<std::string> words_;
  std::map<std::string, std::int32_t, std::less<>> ids_;
};

// Byte-pair encoding learned by SentencePiece (Debian's libsentencepiece): trained on a
// corpus (`vocab` pieces at most, 256 of them bytes: any byte the pieces do not cover falls
// back to them, so every text encodes; the text is kept as written, no Unicode
// normalization), or read from a
// SentencePiece .model file. vocabulary() is the model file's bytes in base64.
class BpeTokenizer : public Tokenizer {
 public:
  static std::unique_ptr<BpeTokenizer> train(const std::string& text, std::int64_t vocab);
  // `model`: a .model file's bytes; throws DataError naming `source` when it is not one.
  static std::unique_ptr<BpeTokenizer> load(const std::string& model, const std::string& source);
  ~BpeTokenizer() override;
  std::vector<std::int32_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<std::int32_t>& ids) const override;
  std::int64_t vocab_size() const override;
  std::string kind() const override { return "bpe"; }
  std::string vocabulary() const override;
  const std::string& model_file() const { return model_; }  // the .model file's bytes

 private:
  struct Processor;
  BpeTokenizer() = default;
  std::unique_ptr<Processor> sp_;
  std::string model_;
};

// GPT-2's byte-level BPE (Radford et al. 2019), as the files that come with a GPT-2 model
// define it: vocab.json (token -> id) and merges.txt (the merges by rank), or a Hugging Face
// tokenizer.json of a BPE model with the ByteLevel pre-tokenizer. Text is cut into words by
// GPT-2's pattern (contractions, runs of letters, of digits, of other symbols, each with one
// leading space, and whitespace), each word's UTF-8 bytes are spelled with GPT-2's 256
// printable stand-in characters, and adjacent pieces merge lowest rank first. Special tokens
// ("<|endoftext|>", and a tokenizer.json's added tokens) match where they appear as written.
// Invalid UTF-8 in the text is read as U+FFFD. vocabulary() is JSON in printable ASCII.
class Gpt2Tokenizer : public Tokenizer {
 public:
  // The files' contents; `source` names them in errors (DataError: malformed JSON, ids out of
  // range or repeated, a byte without its token, a merge of pieces or into a piece that the
  // vocabulary lacks).
  static std::unique_ptr<Gpt2Tokenizer> from_files(const std::string& vocab_json, const std::string& merges_txt,
                                                   const std::string& source);
  static std::unique_ptr<Gpt2Tokenizer> from_tokenizer_json(const std::string& text, const std::string& source);
  ~Gpt2Tokenizer() override;
  std::vector<std::int32_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<std::int32_t>& ids) const override;
  std::int64_t vocab_size() const override;
  std::string kind() const override { return "gpt2"; }
  std::string vocabulary() const override;
  std::int32_t start_token() const override;  // <|endoftext|> when the vocabulary has it
  std::int32_t end_token() const override;
  struct State;  // (gpt2_bpe.cpp's)

 private:
  Gpt2Tokenizer() = default;
  std::unique_ptr<State> s_;
};

// A tokenizer as a Hugging Face tokenizer.json of a byte-level BPE, which
// Gpt2Tokenizer::from_tokenizer_json reads back token for token: a gpt2 tokenizer's own, or
// a char tokenizer's bytes (each byte's stand-in its token, no merges, a byte it never saw the
// unk_token, id 0, as CharTokenizer maps it). DataError for a word or SentencePiece one (a
// SentencePiece model goes as its own tokenizer.model).
std::string hf_tokenizer_json(const Tokenizer& tokenizer);

// A corpus's tokens, the whole text's (tokenizer.encode(text)), encoded a piece of about
// `piece_bytes` at a time, cut only before a space between two other characters, where no
// tokenizer's piece spans (a word's, SentencePiece's, GPT-2's pre-tokenized ones), and each
// piece's ids appended as encoded: an encoder's own working memory stays a piece's, and ids
// that would pass `budget_bytes` (0: none) throw DataError naming `path` before they are taken.
std::vector<std::int32_t> encode_corpus(const Tokenizer& tokenizer, std::string_view text, std::size_t budget_bytes,
                                        const std::string& path, std::size_t piece_bytes = 16 << 20);
// What a memory budget for a corpus (0: none) leaves its ids once its text of `text_bytes` is
// held, a tenth of them copied again for validation (split_tokens).
std::size_t ids_budget(std::size_t budget, std::size_t text_bytes);

// The first 90% of a corpus's tokens train, the rest validate: the split of every language
// model run (training, and the validation loss of a saved model).
struct TokenSplit {
  std::vector<std::int32_t> train, validation;
};
TokenSplit split_tokens(std::vector<std::int32_t> all);
// The starts of `n` windows of `context` + 1 tokens spread evenly over `tokens` tokens (the
// fixed validation windows); tokens must exceed context + 1.
std::vector<std::int64_t> spread_windows(std::int64_t tokens, std::int64_t context, std::int64_t n);

// Entropy in nats of the tokens' frequency distribution: the loss of the best model that
// ignores context.
double unigram_entropy(const std::vector<std::int32_t>& tokens, std::int64_t vocab);

}  // namespace weft
