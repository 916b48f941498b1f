// BpeTokenizer (text.h): SentencePiece's BPE, trained in memory or read from a .model file.
#include <fcntl.h>
#include <sentencepiece_processor.h>
#include <unistd.h>

#include <cstdio>
#include <sentencepiece_trainer.h>

#include "weft/data/text.h"
#include "weft/util/base64.h"
#include "weft/util/error.h"

namespace weft {

struct BpeTokenizer::Processor {
  sentencepiece::SentencePieceProcessor sp;
};

namespace {

// The longest sentence given to the trainer (--max_sentence_length, in bytes: at most as many
// symbols): SentencePiece's BPE trainer packs a symbol's index in a sentence as `l << 16` in
// an int, which overflows past index 32767 (a line of 33,000 'a's crashed it), and it skips
// longer sentences.
constexpr std::size_t kMaxSentence = 32768;

// The corpus, one line at a time, for the trainer; a line longer than the trainer takes in
// pieces (a corpus without line breaks would otherwise leave it nothing).
class Lines : public sentencepiece::SentenceIterator {
 public:
  explicit Lines(const std::string& text) : text_(text) { Next(); }
  bool done() const override { return done_; }
  void Next() override {
    while (at_ < text_.size()) {
      std::size_t end = text_.find('\n', at_);
      if (end == std::string::npos) end = text_.size();
      std::size_t next = end + 1;
      if (end - at_ > kMaxSentence) end = next = piece_end(at_);
      line_ = text_.substr(at_, end - at_);
      at_ = next;
      if (!line_.empty()) return;
    }
    done_ = true;
  }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  // The end of a piece of at most kMaxSentence bytes from `from` (more follow): after its last
  // space or tab, else before the last character that starts within it (UTF-8 kept whole).
  std::size_t piece_end(std::size_t from) const {
    std::size_t end = from + kMaxSentence;
    const std::size_t space = text_.find_last_of(" \t", end - 1);
    if (space != std::string::npos && space >= from + kMaxSentence / 2) return space + 1;
    while (end > from + 1 && (static_cast<unsigned char>(text_[end]) & 0xC0) == 0x80) --end;
    return end;
  }

  const std::string& text_;
  std::size_t at_ = 0;
  std::string line_;
  bool done_ = false;
};

}  // namespace

BpeTokenizer::~BpeTokenizer() = default;

std::unique_ptr<BpeTokenizer> BpeTokenizer::train(const std::string& text, std::int64_t vocab) {
  if (vocab < 64 || vocab > 1000000) throw ConfigError("--vocab-size must be in 64..1000000 for a BPE tokenizer");
  Lines lines(text);
  std::string model;
  // Identity normalization and whitespace kept: decode(encode(text)) is the text. One
  // thread: the same corpus gives the same pieces. Byte fallback: any byte encodes (the
  // rarest 0.05% of the characters too, as their bytes).
  const std::string args = "--model_type=bpe --vocab_size=" + std::to_string(vocab) +
                           " --character_coverage=0.9995 --byte_fallback=true --normalization_rule_name=identity"
                           " --remove_extra_whitespaces=false --add_dummy_prefix=false --split_digits=true"
                           " --hard_vocab_limit=false --num_threads=1 --max_sentence_length=" + std::to_string(kMaxSentence) +
                           " --bos_id=-1 --eos_id=-1 --pad_id=-1 --unk_id=0 --minloglevel=2";
  // The trainer logs its command line to stderr before it reads --minloglevel: quiet it.
  std::fflush(stderr);
  const int saved = ::dup(2), null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (saved >= 0 && null >= 0) ::dup2(null, 2);
  const auto status = sentencepiece::SentencePieceTrainer::Train(args, &lines, &model);
  if (saved >= 0 && null >= 0) ::dup2(saved, 2);
  for (int fd : {saved, null})
    if (fd >= 0) ::close(fd);
  if (!status.ok())
    throw DataError("--vocab-size " + std::to_string(vocab) + ": training the BPE tokenizer failed (" +
                    std::string(status.message()) + "; the vocabulary holds 256 byte pieces besides the text's characters)");
  return load(model, "the trained BPE tokenizer");
}

std::unique_ptr<BpeTokenizer> BpeTokenizer::load(const std::string& model, const std::string& source) {
  std::unique_ptr<BpeTokenizer> t(new BpeTokenizer());
  t->sp_ = std::make_unique<Processor>();
  const auto status = t->sp_->sp.LoadFromSerializedProto(model);
  if (!status.ok()) throw DataError(source + ": not a SentencePiece model (" + std::string(status.message()) + ")");
  t->model_ = model;
  return t;
}

std::vector<std::int32_t> BpeTokenizer::encode(const std::string& text) const {
  std::vector<int> ids;
  const auto status = sp_->sp.Encode(text, &ids);
  if (!status.ok()) throw DataError("BPE encoding failed: " + std::string(status.message()));
  return {ids.begin(), ids.end()};
}

std::string BpeTokenizer::decode(const std::vector<std::int32_t>& ids) const {
  const int n = sp_->sp.GetPieceSize();
  std::vector<int> valid;
  for (std::int32_t id : ids)
    if (id >= 0 && id < n) valid.push_back(id);
  return sp_->sp.DecodeIds(valid);
}

std::int64_t BpeTokenizer::vocab_size() const { return sp_->sp.GetPieceSize(); }

std::string BpeTokenizer::vocabulary() const { return base64_encode(model_); }

}  // namespace weft
