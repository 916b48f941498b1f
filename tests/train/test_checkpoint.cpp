#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <regex>
#include <set>

#include <filesystem>

#include "../test_support.h"
#include "weft/io/checkpoint.h"
#include "weft/io/safetensors.h"
#include "weft/nn/models.h"
#include "weft/tensor/ops.h"
#include "weft/train/train_flags.h"
#include "weft/train/loop.h"
#include "weft/util/file.h"

using namespace weft;
using weft::testing::TempDir;

namespace {
template <class F>
std::string checkpoint_error(F&& f) {
  try {
    f();
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "no error";
}

CheckpointMeta meta_for(const std::string& model, std::int64_t step) {
  CheckpointMeta m;
  m.model = model;
  m.step = step;
  m.epoch = 1;
  m.batch_in_epoch = 3;
  m.sample_in_epoch = 200;
  m.optimizer = "sgd";
  m.optimizer_steps = step;
  Rng r(5);
  r.normal();
  m.rngs.emplace_back("init", r.state());
  return m;
}
}  // namespace

TEST(Safetensors, RoundTripAndLayout) {
  StateDict sd{{"a", Tensor::arange(6).view({2, 3})}, {"b", Tensor::full({1}, 2.5, DType::F64)}};
  std::string bytes = encode_safetensors(sd, {{"k", "v"}});
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= std::uint64_t{static_cast<unsigned char>(bytes[i])} << (8 * i);
  EXPECT_EQ((8 + n) % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + n + 6 * 4 + 8);
  SafetensorsFile f = decode_safetensors(bytes, "x");
  ASSERT_EQ(f.tensors.size(), 2u);
  EXPECT_EQ(f.tensors[0].first, "a");
  EXPECT_TRUE(ops::equal(f.tensors[0].second, sd[0].second));
  EXPECT_TRUE(ops::equal(f.tensors[1].second, sd[1].second));
  EXPECT_EQ(f.metadata.at("k"), "v");
}

// Written to a file piece by piece: the same bytes as encoded in memory (a tensor in its own
// dtype, one converted, one not contiguous), their CRC-32 returned; a file that cannot be
// written leaves nothing behind, and one already there stays whole.
TEST(Safetensors, WrittenToAFileAsEncodedInMemory) {
  TempDir dir;
  const Tensor m = Tensor::arange(12).view({3, 4});
  StateDict sd{{"a", Tensor::arange(6).view({2, 3})}, {"t", m.t()}, {"b", Tensor::full({2}, 2.5, DType::F64)}};
  const std::map<std::string, std::string> dtypes{{"a", "F16"}};
  const std::string want = encode_safetensors(sd, {{"k", "v"}}, dtypes);
  const std::string path = dir.path() + "/w.safetensors";
  EXPECT_EQ(write_safetensors(path, sd, {{"k", "v"}}, dtypes), crc32_of(want));
  EXPECT_EQ(read_file(path), want);
  EXPECT_EQ(crc32_of(""), 0u);
  EXPECT_EQ(crc32_of("123456789"), 0xCBF43926u);  // the CRC-32 check value
  EXPECT_EQ(crc32_of("6789", crc32_of("12345")), 0xCBF43926u);
  // A value the dtype cannot hold: refused, and the file written before is still whole.
  StateDict bad{{"i", Tensor::full({1}, 0.5)}};
  EXPECT_NE(checkpoint_error([&] { write_safetensors(path, bad, {}, {{"i", "I32"}}); }).find("cannot be stored as I32"),
            std::string::npos);
  EXPECT_EQ(read_file(path), want);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), std::filesystem::directory_iterator()), 1);
  EXPECT_NE(checkpoint_error([&] { write_safetensors(dir.path() + "/no/such/folder/x.safetensors", sd); }).find("cannot create"),
            std::string::npos);
}

TEST(Safetensors, RejectsMalformedFiles) {
  std::string good = encode_safetensors({{"a", Tensor::arange(4)}});
  EXPECT_NE(checkpoint_error([&] { decode_safetensors("abc", "f"); }).find("too short"), std::string::npos);
  std::string big_len = good;
  big_len[5] = 1;
  EXPECT_NE(checkpoint_error([&] { decode_safetensors(big_len, "f"); }).find("exceeds"), std::string::npos);
  std::string bad_json = good;
  bad_json[8] = '[';
  EXPECT_NE(checkpoint_error([&] { decode_safetensors(bad_json, "f"); }), "no error");
  EXPECT_NE(checkpoint_error([&] { decode_safetensors(good.substr(0, good.size() - 4), "f"); }).find("outside"),
            std::string::npos);
}

// Numbers that are not whole numbers in range are refused by name, never cast (a float
// beyond an integer type's range converted to it is undefined behaviour).
TEST(Safetensors, FloatAndHugeNumbersInTheHeaderAreRefused) {
  auto file = [](const std::string& header) {
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xFF);
    return bytes + header + std::string(16, '\0');
  };
  for (const char* offsets : {"[0, -1.6]", "[0, 1e300]", "[-1, 16]", "[0, 18446744073709551615]"}) {
    const std::string h = std::string(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": )") + offsets + "}}";
    EXPECT_NE(checkpoint_error([&] { decode_safetensors(file(h), "f"); }).find("data_offsets"), std::string::npos) << offsets;
  }
  for (const char* shape : {"[4.5]", "[1e300]", "[-2]"}) {
    const std::string h = std::string(R"({"a": {"dtype": "F32", "shape": )") + shape + R"(, "data_offsets": [0, 16]}})";
    EXPECT_NE(checkpoint_error([&] { decode_safetensors(file(h), "f"); }).find("dimension"), std::string::npos) << shape;
  }
}

// Every dtype of the format, written and read back: floats round to nearest even once,
// integers come back exactly, and a BF16 tensor stays bitwise the same.
TEST(Safetensors, EveryDtypeRoundTrips) {
  const std::vector<double> values{-3, 0, 1, 2, 100, 0.5};
  const Tensor t = Tensor::from_vector(values, {2, 3});
  for (const char* dt : {"F32", "F64", "F16", "BF16"}) {
    const SafetensorsFile f = decode_safetensors(encode_safetensors({{"w", t}}, {}, {{"w", dt}}), "x");
    EXPECT_EQ(f.dtypes.at("w"), dt);
    EXPECT_EQ(f.tensors[0].second.shape(), t.shape());
    EXPECT_TRUE(ops::equal(f.tensors[0].second.to(DType::F64), t)) << dt;  // these values are exact in all four
  }
  const Tensor whole = Tensor::from_vector(std::vector<double>{-3, 0, 1, 2, 100, 7}, {6});
  for (const char* dt : {"I8", "I16", "I32", "I64"}) {
    const SafetensorsFile f = decode_safetensors(encode_safetensors({{"i", whole}}, {}, {{"i", dt}}), "x");
    EXPECT_EQ(f.dtypes.at("i"), dt);
    EXPECT_TRUE(ops::equal(f.tensors[0].second.to(DType::F64), whole)) << dt;
  }
  const Tensor positive = Tensor::from_vector(std::vector<double>{0, 1, 255}, {3});
  for (const char* dt : {"U8", "U16", "U32", "U64"})
    EXPECT_TRUE(ops::equal(decode_safetensors(encode_safetensors({{"u", positive}}, {}, {{"u", dt}}), "x")
                               .tensors[0].second.to(DType::F64), positive)) << dt;
  // F16 rounds to nearest even: 1 + 2^-11 lies halfway between 1 and 1 + 2^-10.
  const Tensor halfway = Tensor::from_vector(std::vector<double>{1.0 + std::ldexp(1.0, -11), 70000.0}, {2});
  const Tensor h = decode_safetensors(encode_safetensors({{"h", halfway}}, {}, {{"h", "F16"}}), "x").tensors[0].second;
  EXPECT_EQ(h.to(DType::F64).at({0}), 1.0);
  EXPECT_TRUE(std::isinf(h.to(DType::F64).at({1})));  // beyond F16's 65504
  // A BF16 tensor is written as BF16 by default, bit for bit.
  const Tensor b = t.to(DType::BF16);
  const SafetensorsFile fb = decode_safetensors(encode_safetensors({{"b", b}}), "x");
  EXPECT_EQ(fb.dtypes.at("b"), "BF16");
  EXPECT_EQ(fb.tensors[0].second.dtype(), DType::BF16);
  EXPECT_EQ(std::memcmp(fb.tensors[0].second.raw_data(), b.contiguous().raw_data(), b.nbytes()), 0);
}

TEST(Safetensors, ValuesADtypeCannotHoldAreRefused) {
  const Tensor t = Tensor::from_vector(std::vector<double>{1.5, 300}, {2});
  EXPECT_NE(checkpoint_error([&] { encode_safetensors({{"t", t}}, {}, {{"t", "I32"}}); }).find("cannot be stored as I32"),
            std::string::npos);
  EXPECT_NE(checkpoint_error([&] { encode_safetensors({{"t", Tensor::from_vector(std::vector<double>{300}, {1})}}, {}, {{"t", "U8"}}); })
                .find("cannot be stored as U8"), std::string::npos);
  EXPECT_NE(checkpoint_error([&] { encode_safetensors({{"t", t}}, {}, {{"t", "F8_E4M3"}}); }).find("unknown"),
            std::string::npos);
  // A 64-bit integer beyond 2^53 in a file is refused, not rounded.
  std::string header = R"({"i": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}})";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  bytes += header;
  const std::int64_t big = (std::int64_t{1} << 53) + 1;
  bytes.append(reinterpret_cast<const char*>(&big), 8);
  EXPECT_NE(checkpoint_error([&] { decode_safetensors(bytes, "f"); }).find("beyond 2^53"), std::string::npos);
}

TEST(Checkpoint, MetadataNumbersMustBeWholeNumbers) {
  const std::string base = R"({"format": "weft-checkpoint", "version": 1, "model": "mlp", "step": STEP, "epoch": 0,
    "batch_in_epoch": 0, "optimizer": {"name": "sgd", "steps": 0}, "rng": {}, "info": {}})";
  auto with_step = [&](const std::string& step) { return std::regex_replace(base, std::regex("STEP"), step); };
  EXPECT_EQ(parse_checkpoint_meta(with_step("7"), "m").step, 7);
  EXPECT_FALSE(parse_checkpoint_meta(with_step("7"), "m").sample_in_epoch);  // older checkpoints: absent
  const std::string at = std::regex_replace(with_step("7"), std::regex("\"epoch\": 0,"), "\"epoch\": 0, \"sample_in_epoch\": SAMPLE,");
  EXPECT_EQ(parse_checkpoint_meta(std::regex_replace(at, std::regex("SAMPLE"), "96"), "m").sample_in_epoch,
            std::optional<std::int64_t>(96));
  for (const char* sample : {"-1", "2.5", "\"9\""})
    EXPECT_NE(checkpoint_error([&] { parse_checkpoint_meta(std::regex_replace(at, std::regex("SAMPLE"), sample), "m"); })
                  .find("sample_in_epoch"),
              std::string::npos)
        << sample;
  for (const char* step : {"1e300", "-1", "2.5", "\"7\"", "18446744073709551615"})
    EXPECT_NE(checkpoint_error([&] { parse_checkpoint_meta(with_step(step), "m"); }).find("step"), std::string::npos) << step;
  EXPECT_NE(checkpoint_error([&] { parse_checkpoint_meta(R"({"format": "weft-checkpoint", "version": 1e300})", "m"); })
                .find("unsupported checkpoint version 1e+300"),
            std::string::npos);
}

TEST(Checkpoint, SaveLoadAndPrune) {
  TempDir dir;
  Rng rng(1);
  auto model = make_model("mlp", rng);
  StateDict optim{{"momentum.1.weight", Tensor::ones({256, 784})}};
  for (std::int64_t step : {10, 20, 30, 40}) save_checkpoint(dir.path(), meta_for("mlp", step), model->state_dict(), optim, 2);
  auto latest = latest_checkpoint(dir.path());
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(std::filesystem::path(*latest).filename(), "step-000000040");
  EXPECT_FALSE(is_directory(dir / "step-000000010"));
  EXPECT_FALSE(is_directory(dir / "step-000000020"));
  EXPECT_TRUE(is_directory(dir / "step-000000030"));
  Checkpoint c = load_checkpoint(*latest);
  EXPECT_EQ(c.meta.model, "mlp");
  EXPECT_EQ(c.meta.step, 40);
  EXPECT_EQ(c.meta.batch_in_epoch, 3);
  EXPECT_EQ(c.meta.sample_in_epoch, std::optional<std::int64_t>(200));
  ASSERT_EQ(c.meta.rngs.size(), 1u);
  EXPECT_EQ(c.meta.rngs[0].second.s, meta_for("mlp", 1).rngs[0].second.s);
  EXPECT_EQ(c.meta.rngs[0].second.spare, meta_for("mlp", 1).rngs[0].second.spare);
  Rng other(2);
  auto restored = make_model("mlp", other);
  restored->load_state_dict(c.model);
  EXPECT_TRUE(ops::equal(restored->parameters()[0].value(), model->parameters()[0].value()));
  EXPECT_TRUE(ops::equal(c.optimizer[0].second, optim[0].second));
}

TEST(Checkpoint, HalfWrittenCheckpointsAreIgnored) {
  TempDir dir;
  Rng rng(1);
  auto model = make_model("mlp128", rng);
  save_checkpoint(dir.path(), meta_for("mlp128", 5), model->state_dict(), {});
  // A crash while writing leaves a temporary folder, or a step folder without meta.json.
  make_directories(dir / ".step-000000009.tmp");
  write_file_atomic(dir / ".step-000000009.tmp/model.safetensors", "partial");
  make_directories(dir / "step-000000010");
  EXPECT_EQ(std::filesystem::path(*latest_checkpoint(dir.path())).filename(), "step-000000005");
}

TEST(Checkpoint, DetectsCorruption) {
  TempDir dir;
  Rng rng(1);
  auto model = make_model("mlp128", rng);
  std::string path = save_checkpoint(dir.path(), meta_for("mlp128", 5), model->state_dict(), {});
  std::string file = path + "/model.safetensors";
  std::string bytes = read_file(file);
  bytes[bytes.size() / 2] ^= 0x40;
  write_file_atomic(file, bytes);
  std::string msg = checkpoint_error([&] { load_checkpoint(path); });
  EXPECT_NE(msg.find("checksum mismatch"), std::string::npos) << msg;
  EXPECT_NE(msg.find(file), std::string::npos) << msg;
  // meta.json's own fields are checked too (before the tensors): one changed digit of the step.
  std::string meta = read_file(path + "/meta.json");
  const std::size_t step = meta.find("\"step\": 5");
  ASSERT_NE(step, std::string::npos) << meta;
  meta[step + 8] = '6';
  write_file_atomic(path + "/meta.json", meta);
  EXPECT_NE(checkpoint_error([&] { load_checkpoint(path); }).find("meta.json: checksum mismatch"), std::string::npos);
  write_file_atomic(path + "/meta.json", "{not json");
  EXPECT_NE(checkpoint_error([&] { load_checkpoint(path); }).find("not valid JSON"), std::string::npos);
  write_file_atomic(path + "/meta.json", "{\"format\": \"weft-checkpoint\", \"version\": 1}");
  EXPECT_NE(checkpoint_error([&] { load_checkpoint(path); }).find("malformed metadata"), std::string::npos);
  EXPECT_NE(checkpoint_error([&] { load_checkpoint(dir / "nothing"); }).find("does not exist"), std::string::npos);
}

// 2 epochs straight and 1 epoch + resume + 1 epoch give bitwise identical parameters,
// also when the interruption falls in the middle of an epoch.
TEST(Resume, IsBitwiseExact) {
  TempDir data;
  weft::testing::write_synthetic_mnist(data.path(), 300, 50);
  for (const char* model : {"mlp", "cnn"}) {
    for (const char* optimizer : {"sgd", "adam"}) {
      TrainOptions c;
      c.model = model;
      c.optimizer = optimizer;
      c.lr = std::string(optimizer) == "sgd" ? 0.01 : 0.001;
      c.data = data.path();
      c.batch = 32;
      c.epochs = 2;
      c.seed = 3;
      c.threads = 2;
      c.quiet = true;
      c.lr_schedule_kind = "cosine";
      c.warmup = 3;
      TempDir straight, split, mid;
      c.checkpoint_dir = straight.path();
      c.checkpoint_every = 4;
      c.keep_checkpoints = 100;
      train(c, stdout);
      // The run cut off after its first epoch (its checkpoints up to step 10, one epoch of
      // 300 / 32), and in the middle of it (up to step 4), then resumed: the schedule's
      // horizon stays the run's.
      c.resume = true;
      for (const auto& [folder, last] : {std::pair{&split, 10}, {&mid, 4}}) {
        std::filesystem::copy(straight.path(), folder->path(), std::filesystem::copy_options::recursive |
                                                                 std::filesystem::copy_options::overwrite_existing);
        for (const auto& entry : std::filesystem::directory_iterator(folder->path()))
          if (entry.path().filename().string().rfind("step-", 0) == 0 &&
              std::stoll(entry.path().filename().string().substr(5)) > last)
            std::filesystem::remove_all(entry.path());
        ASSERT_EQ(std::filesystem::path(*latest_checkpoint(folder->path())).filename(), fmt::format("step-{:09}", last));
        c.checkpoint_dir = folder->path();
        train(c, stdout);
      }
      std::string a = read_file(*latest_checkpoint(straight.path()) + "/model.safetensors");
      EXPECT_EQ(a, read_file(*latest_checkpoint(split.path()) + "/model.safetensors")) << model << " " << optimizer;
      EXPECT_EQ(a, read_file(*latest_checkpoint(mid.path()) + "/model.safetensors")) << model << " " << optimizer;
      EXPECT_EQ(read_file(*latest_checkpoint(straight.path()) + "/optimizer.safetensors"),
                read_file(*latest_checkpoint(mid.path()) + "/optimizer.safetensors"));
    }
  }
}

TEST(Resume, RejectsAnotherModelAndMissingCheckpoints) {
  TempDir data, ck;
  weft::testing::write_synthetic_mnist(data.path(), 64, 10);
  TrainOptions c;
  c.model = "mlp";
  c.data = data.path();
  c.checkpoint_dir = ck.path();
  c.quiet = true;
  c.resume = true;
  EXPECT_NE(checkpoint_error([&] { train(c, stdout); }).find("no checkpoint"), std::string::npos);
  c.resume = false;
  train(c, stdout);
  c.resume = true;
  c.model = "mlp128";
  EXPECT_NE(checkpoint_error([&] { train(c, stdout); }).find("holds model 'mlp', not 'mlp128'"), std::string::npos);
}

TEST(Train, LearnsTheSyntheticTask) {
  TempDir data;
  weft::testing::write_synthetic_mnist(data.path(), 600, 200);
  TrainOptions c;
  c.model = "mlp";
  c.data = data.path();
  c.epochs = 2;
  c.quiet = true;
  TrainSummary s = train(c, stdout);
  EXPECT_GT(s.json.at("test_accuracy").get<double>(), 0.95);
  EXPECT_EQ(s.json.at("steps").get<std::int64_t>(), 2 * 10);
  EXPECT_EQ(s.json.at("samples").get<std::int64_t>(), 1200);
}

TEST(Train, ValidatesConfiguration) {
  auto rejects = [](auto change) {
    TrainOptions c;
    change(c);
    EXPECT_THROW(validate(with_task_defaults(c)), ConfigError);
  };
  rejects([](TrainOptions& c) { c.batch = 0; });
  rejects([](TrainOptions& c) { c.model = "vgg"; });
  rejects([](TrainOptions& c) { c.optimizer = "rmsprop"; });
  rejects([](TrainOptions& c) { c.resume = true; });
  rejects([](TrainOptions& c) { c.lr = -1; });
  rejects([](TrainOptions& c) { c.parallel.strategy = "gossip"; });
  rejects([](TrainOptions& c) { c.parallel.local_steps = 0; });
  rejects([](TrainOptions& c) { c.non_iid = 0; });
  rejects([](TrainOptions& c) {  // the asynchronous parameter server has no checkpoints
    c.parallel.strategy = "ps";
    c.parallel.staleness = 1;
    c.checkpoint_dir = "ck";
  });
  rejects([](TrainOptions& c) { c.parallel.staleness = 2; });  // without --strategy ps
  rejects([](TrainOptions& c) { c.parallel.staleness = -3; });
  TrainOptions ok;
  EXPECT_NO_THROW(validate(with_task_defaults(ok)));
}

// A flag given to a run it does not shape is refused, naming what it needs (train_flags.h);
// the same flag is taken by a run it shapes.
TEST(TrainOptions, FlagsThatDoNotShapeTheRunAreRefused) {
  const auto refused = [](const std::string& flag, auto change) {
    TrainOptions c;
    change(c);
    return !flag_applies(flag, with_task_defaults(c));
  };
  const auto none = [](TrainOptions&) {};
  EXPECT_TRUE(refused("--non-iid", none));
  EXPECT_FALSE(refused("--non-iid", [](TrainOptions& c) { c.parallel.strategy = "fedavg"; }));
  EXPECT_TRUE(refused("--gamma", none));  // the image models' schedule is constant
  EXPECT_FALSE(refused("--gamma", [](TrainOptions& c) { c.lr_schedule_kind = "step"; }));
  EXPECT_TRUE(refused("--min-lr", none));
  EXPECT_FALSE(refused("--min-lr", [](TrainOptions& c) { c.model = "gpt"; }));  // cosine by default
  EXPECT_TRUE(refused("--recompute", [](TrainOptions& c) { c.model = "cnn"; }));
  EXPECT_TRUE(refused("--momentum", [](TrainOptions& c) { c.optimizer = "adamw"; }));
  EXPECT_TRUE(refused("--lstm-variant", [](TrainOptions& c) { c.model = "rnn"; }));
  EXPECT_FALSE(refused("--lstm-variant", [](TrainOptions& c) { c.model = "lstm"; c.lstm_variant = "seed"; }));
  EXPECT_TRUE(refused("--chunks", [](TrainOptions& c) { c.model = "gpt"; c.parallel.mesh.pp = 2; }));
  EXPECT_FALSE(refused("--chunks", [](TrainOptions& c) {
    c.model = "gpt";
    c.parallel.mesh.pp = 2;
    c.pipeline_schedule = "interleaved";
  }));
  EXPECT_FALSE(refused("--lr", none));  // shapes every run
  TrainOptions fedavg;
  fedavg.parallel.strategy = "fedavg";
  EXPECT_NO_THROW(check_flags_apply({"--lr", "--non-iid", "--local-steps"}, with_task_defaults(fedavg)));
  try {
    check_flags_apply({"--lr", "--servers"}, with_task_defaults(fedavg));
    ADD_FAILURE() << "--servers taken by a federated run";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "--servers does not apply to this run: it is for --strategy ps, and the run has --strategy fedavg");
  }
}

// A library caller's options get the command line's checks, from the same table: each value
// that differs from the initial one against its flag's bounds or choices, in the flag's words.
TEST(TrainFlags, ValuesAreCheckedAgainstTheTable) {
  const auto error = [](auto change) {
    TrainOptions c;
    change(c);
    try {
      validate(with_task_defaults(c));
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error([](TrainOptions& c) { c.batch = 0; }), "--batch: must be at least 1, got 0");
  EXPECT_EQ(error([](TrainOptions& c) { c.momentum = 1; }), "--momentum: must be in [0, 1), got 1");
  EXPECT_EQ(error([](TrainOptions& c) { c.lr = std::numeric_limits<double>::infinity(); }),
            "--lr: must be a finite number, got inf");
  EXPECT_EQ(error([](TrainOptions& c) { c.precision = "fp16"; }), "--precision: unknown value 'fp16' (known: fp32, bf16)");
  EXPECT_EQ(error([](TrainOptions& c) { c.parallel.zero = 4; }), "--zero: must be in [0, 3], got 4");
  EXPECT_EQ(error([](TrainOptions& c) { c.threads = -1; }), "--threads: must be in [1, 4096], got -1");
  EXPECT_EQ(error([](TrainOptions&) {}), "");  // the initial values mean "the default"
  EXPECT_EQ(error([](TrainOptions& c) { c.momentum = 0.5; c.parallel.zero = 2; c.model = "gpt"; }), "");
}

// Every flag of the table is in exactly one group, named once, with help; a flag it excludes
// or whose runs it names is one of its flags, and the docs' tables list every flag.
TEST(TrainFlags, TheTableIsWhole) {
  const auto& table = train_flags();
  std::set<std::string> names;
  for (const auto& f : table) {
    EXPECT_TRUE(names.insert(f.name).second) << f.name << " twice";
    EXPECT_FALSE(f.help.empty()) << f.name;
    EXPECT_FALSE(f.group.empty()) << f.name;
    EXPECT_EQ(f.applies == nullptr, f.needs.empty()) << f.name;
  }
  std::string all;
  for (const std::string& g : groups_in_order(table)) all += flags_markdown(table, g);
  for (const auto& f : table) {
    for (const std::string& other : f.excludes) EXPECT_TRUE(names.count(other)) << f.name << " excludes " << other;
    EXPECT_NE(all.find("| `" + f.name + "` |"), std::string::npos) << f.name;
  }
  EXPECT_GE(table.size(), 90u);
}

// The learning-rate schedule ends where the run ends: its epochs, or --max-steps first.
TEST(TrainOptions, ScheduleHorizonIsTheRunsLastStep) {
  TrainOptions c;
  c.lr_schedule_kind = "cosine";
  c.max_steps = 100;
  EXPECT_EQ(lr_schedule(with_task_defaults(c), 938).total_steps, 100);
  c.max_steps = 5000;
  EXPECT_EQ(lr_schedule(with_task_defaults(c), 938).total_steps, 938);
  c.max_steps = 0;  // images: no limit
  EXPECT_EQ(lr_schedule(with_task_defaults(c), 938).total_steps, 938);
  c.lr_schedule_kind = "step";  // a step schedule has no default step size
  EXPECT_THROW(validate(with_task_defaults(c)), ConfigError);
  c.step_size = 300;
  EXPECT_NO_THROW(validate(with_task_defaults(c)));
}

TEST(Checkpoint, EncodedInOneByteString) {
  Rng rng(1);
  auto model = make_model("mlp", rng);
  Checkpoint ck;
  ck.meta = meta_for("mlp", 12);
  ck.meta.sample_in_epoch = 768;
  ck.meta.info["window_steps"] = "3";
  ck.model = model->state_dict();
  ck.optimizer = {{"momentum.1.weight", Tensor::ones({4, 3})}};
  const Checkpoint back = decode_checkpoint(encode_checkpoint(ck), "handed");
  EXPECT_EQ(back.meta.step, 12);
  EXPECT_EQ(back.meta.sample_in_epoch, std::optional<std::int64_t>(768));
  EXPECT_EQ(back.meta.info.at("window_steps"), "3");
  ASSERT_EQ(back.model.size(), ck.model.size());
  for (std::size_t i = 0; i < ck.model.size(); ++i) {
    EXPECT_EQ(back.model[i].first, ck.model[i].first);
    EXPECT_TRUE(ops::equal(back.model[i].second, ck.model[i].second));
  }
  ASSERT_EQ(back.optimizer.size(), 1u);
  EXPECT_EQ(back.optimizer[0].first, "momentum.1.weight");
  // Bytes that are not an encoded checkpoint: one error naming them.
  EXPECT_NE(checkpoint_error([] { decode_checkpoint("garbage", "handed"); }).find("handed"), std::string::npos);
  EXPECT_NE(checkpoint_error([] { decode_checkpoint(encode_safetensors({{"x", Tensor::ones({2})}}), "handed"); })
                .find("no checkpoint metadata"),
            std::string::npos);
  EXPECT_NE(checkpoint_error([] {
              decode_checkpoint(encode_safetensors({{"x", Tensor::ones({2})}}, {{"meta", "{}"}}), "handed");
            }).find("handed"),
            std::string::npos);
}
