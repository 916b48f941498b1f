// Training checkpoints.
//
// A checkpoint is a folder D/step-<N>/ holding
//   model.safetensors      the model's parameters, by state-dict name
//   optimizer.safetensors  the optimizer's buffers (momentum, Adam moments)
//   meta.json              step, epoch, position in the epoch, optimizer settings and step
//                          count, RNG states, and the CRC-32 of both tensor files
// It is written into a temporary folder (every file fsynced) that is then renamed to its
// final name, so a checkpoint is either complete or absent. Loading verifies the
// checksums and reports a corrupt or foreign checkpoint as one line.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "weft/nn/module.h"
#include "weft/tensor/rng.h"

namespace weft {

struct CheckpointMeta {
  std::string model;              // model name, checked on load
  std::int64_t step = 0;          // optimizer steps taken
  std::int64_t epoch = 0;         // the epoch to continue in (0-based)
  std::int64_t batch_in_epoch = 0;  // the next batch of that epoch (of the run's global batch)
  std::optional<std::int64_t> sample_in_epoch;  // the samples of that epoch trained (older
                                                // checkpoints: batch_in_epoch x info's batch)
  std::string optimizer;          // "sgd", "adam", "adamw"
  std::int64_t optimizer_steps = 0;
  std::vector<std::pair<std::string, RngState>> rngs;
  std::map<std::string, std::string> info;  // the run's settings, for the record
  std::map<std::string, std::string> checksums;  // file -> CRC-32 as meta.json records it (on load)
};

struct Checkpoint {
  std::string path;
  CheckpointMeta meta;
  StateDict model;
  StateDict optimizer;
};

// Writes D/step-<step>/ and keeps only the newest `keep` checkpoints (keep >= 1).
// `per_rank` (ZeRO: each rank's optimizer shard) adds optimizer-rank<r>.safetensors files,
// checksummed like the others, next to the consolidated optimizer.safetensors.
// Returns the folder written.
std::string save_checkpoint(const std::string& dir, const CheckpointMeta& meta, const StateDict& model,
                            const StateDict& optimizer, int keep = 3, const std::vector<StateDict>& per_rank = {});
// The newest complete checkpoint folder in `dir`, if any.
std::optional<std::string> latest_checkpoint(const std::string& dir);
// The metadata of meta.json's text (format, version, every field checked); throws
// CheckpointError naming `meta_path` and the problem.
CheckpointMeta parse_checkpoint_meta(const std::string& text, const std::string& meta_path);
// Loads and verifies one checkpoint folder; throws CheckpointError naming the file.
Checkpoint load_checkpoint(const std::string& path);

// A checkpoint as one byte string, to hand a run's state to other processes (a live
// elastic job's joiners): one safetensors holding the model's tensors as "model/NAME", the
// optimizer's as "optimizer/NAME" and meta.json's text as metadata. Decoding checks it as
// loading checks the files (CheckpointError naming `name`).
std::string encode_checkpoint(const Checkpoint& ck);
Checkpoint decode_checkpoint(std::string_view bytes, const std::string& name);

}  // namespace weft
