#include "weft/io/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>

#include "weft/io/safetensors.h"
#include "weft/tensor/allocator.h"
#include "weft/util/file.h"
#include "weft/util/json_integer.h"

namespace weft {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kFormat = "weft-checkpoint";
constexpr int kVersion = 1;

std::string hex(std::uint32_t crc) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08lx", static_cast<unsigned long>(crc));
  return buf;
}

std::string crc32_hex(std::string_view bytes) { return hex(crc32_of(bytes)); }

std::string step_name(std::int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%09lld", static_cast<long long>(step));
  return buf;
}

std::string u64_hex(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::uint64_t parse_u64_hex(const std::string& s) {
  if (s.size() != 16 || s.find_first_not_of("0123456789abcdef") != std::string::npos) {
    throw CheckpointError("bad RNG state value '" + s + "'");
  }
  return std::stoull(s, nullptr, 16);
}

json meta_to_json(const CheckpointMeta& m) {
  json rngs = json::object();
  for (const auto& [name, st] : m.rngs) {
    json words = json::array();
    for (auto w : st.s) words.push_back(u64_hex(w));
    double spare = st.spare;
    std::uint64_t spare_bits;
    std::memcpy(&spare_bits, &spare, 8);
    rngs[name] = {{"state", words}, {"has_spare", st.has_spare}, {"spare_bits", u64_hex(spare_bits)}};
  }
  json j = {{"format", kFormat},           {"version", kVersion},
            {"model", m.model},            {"step", m.step},
            {"epoch", m.epoch},            {"batch_in_epoch", m.batch_in_epoch},
            {"optimizer", {{"name", m.optimizer}, {"steps", m.optimizer_steps}}},
            {"rng", rngs},                 {"info", m.info}};
  if (m.sample_in_epoch) j["sample_in_epoch"] = *m.sample_in_epoch;
  return j;
}

CheckpointMeta meta_from_json(const json& j) {
  CheckpointMeta m;
  m.model = j.at("model").get<std::string>();
  auto whole = [](const json& v, const char* what) {
    const std::optional<std::int64_t> n = json_integer(v, 0);
    if (!n) throw CheckpointError(std::string(what) + " must be a whole number >= 0, got " + v.dump());
    return *n;
  };
  m.step = whole(j.at("step"), "step");
  m.epoch = whole(j.at("epoch"), "epoch");
  m.batch_in_epoch = whole(j.at("batch_in_epoch"), "batch_in_epoch");
  if (j.contains("sample_in_epoch")) m.sample_in_epoch = whole(j.at("sample_in_epoch"), "sample_in_epoch");
  m.optimizer = j.at("optimizer").at("name").get<std::string>();
  m.optimizer_steps = whole(j.at("optimizer").at("steps"), "optimizer steps");
  for (auto& [name, r] : j.at("rng").items()) {
    RngState st;
    auto& words = r.at("state");
    if (!words.is_array() || words.size() != 4) throw CheckpointError("RNG '" + name + "' state must have 4 words");
    for (size_t i = 0; i < 4; ++i) st.s[i] = parse_u64_hex(words[i].get<std::string>());
    st.has_spare = r.at("has_spare").get<bool>();
    std::uint64_t bits = parse_u64_hex(r.at("spare_bits").get<std::string>());
    std::memcpy(&st.spare, &bits, 8);
    m.rngs.emplace_back(name, st);
  }
  for (auto& [k, v] : j.at("info").items()) m.info[k] = v.get<std::string>();
  return m;
}

std::vector<std::pair<std::int64_t, std::string>> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<std::int64_t, std::string>> out;
  if (!is_directory(dir)) return out;
  static const std::regex re("step-([0-9]{1,18})");
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    std::string name = e.path().filename().string();
    if (e.is_directory() && std::regex_match(name, m, re) && file_exists(e.path().string() + "/meta.json")) {
      out.emplace_back(std::stoll(m[1].str()), e.path().string());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::string save_checkpoint(const std::string& dir, const CheckpointMeta& meta, const StateDict& model,
                            const StateDict& optimizer, int keep, const std::vector<StateDict>& per_rank) {
  make_directories(dir);
  std::string final_path = dir + "/" + step_name(meta.step);
  std::string tmp_path = dir + "/." + step_name(meta.step) + ".tmp";
  std::error_code ec;
  fs::remove_all(tmp_path, ec);
  make_directories(tmp_path);

  // Each file written from the tensors as they lie (never a whole file in memory), its
  // checksum taken as it is written.
  json j = meta_to_json(meta);
  j["checksums"] = json::object();
  j["checksums"]["model.safetensors"] =
      hex(write_safetensors(tmp_path + "/model.safetensors", model, {{"format", "pt"}, {"weft_model", meta.model}}));
  j["checksums"]["optimizer.safetensors"] =
      hex(write_safetensors(tmp_path + "/optimizer.safetensors", optimizer, {{"weft_optimizer", meta.optimizer}}));
  for (std::size_t r = 0; r < per_rank.size(); ++r) {
    std::string name = "optimizer-rank" + std::to_string(r) + ".safetensors";
    j["checksums"][name] = hex(write_safetensors(tmp_path + "/" + name, per_rank[r],
                                                 {{"weft_optimizer", meta.optimizer}, {"rank", std::to_string(r)}}));
  }
  j["meta_crc32"] = crc32_hex(j.dump());  // meta.json's own fields (the tokenizer, the position) too
  write_file_atomic(tmp_path + "/meta.json", j.dump(2) + "\n");

  if (fs::exists(final_path)) {  // the same step saved again (e.g. after a resume)
    std::string old = final_path + ".old";
    fs::remove_all(old, ec);
    fs::rename(final_path, old, ec);
    if (ec) throw CheckpointError("cannot replace " + final_path + ": " + ec.message());
    fs::rename(tmp_path, final_path, ec);
    if (ec) throw CheckpointError("cannot rename " + tmp_path + ": " + ec.message());
    fs::remove_all(old, ec);
  } else {
    fs::rename(tmp_path, final_path, ec);
    if (ec) throw CheckpointError("cannot rename " + tmp_path + " to " + final_path + ": " + ec.message());
  }
  sync_directory(dir);  // the rename itself survives a power loss
  // Prune the oldest, keeping `keep`.
  auto all = list_checkpoints(dir);
  for (size_t i = 0; i + static_cast<size_t>(std::max(keep, 1)) < all.size(); ++i) fs::remove_all(all[i].second, ec);
  return final_path;
}

std::optional<std::string> latest_checkpoint(const std::string& dir) {
  auto all = list_checkpoints(dir);
  if (all.empty()) return std::nullopt;
  return all.back().second;
}

CheckpointMeta parse_checkpoint_meta(const std::string& text, const std::string& meta_path) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception&) {
    throw CheckpointError(meta_path + ": not valid JSON (corrupt checkpoint)");
  }
  try {
    if (!j.is_object() || j.value("format", "") != kFormat) throw CheckpointError(meta_path + ": not a weft checkpoint");
    const std::optional<std::int64_t> version = j.contains("version") ? json_integer(j["version"]) : std::nullopt;
    if (version != kVersion) {
      throw CheckpointError(meta_path + ": unsupported checkpoint version " + (j.contains("version") ? j["version"].dump() : "(none)"));
    }
    if (j.contains("meta_crc32")) {  // (checkpoints written before it have none)
      const std::string want = j.at("meta_crc32").get<std::string>();
      j.erase("meta_crc32");
      if (crc32_hex(j.dump()) != want)
        throw CheckpointError(meta_path + ": checksum mismatch (CRC-32 " + crc32_hex(j.dump()) + ", expected " + want +
                              "): the file was changed or is corrupt");
    }
    CheckpointMeta m = meta_from_json(j);
    if (j.contains("checksums"))
      for (auto& [file, crc] : j.at("checksums").items()) m.checksums[file] = crc.get<std::string>();
    return m;
  } catch (const json::exception& e) {
    throw CheckpointError(meta_path + ": malformed metadata (" + std::string(e.what()) + ")");
  } catch (const CheckpointError& e) {
    std::string what = e.what();
    if (what.rfind(meta_path, 0) == 0) throw;
    throw CheckpointError(meta_path + ": " + what);
  }
}

Checkpoint load_checkpoint(const std::string& path) {
  if (!is_directory(path)) throw CheckpointError("checkpoint " + path + " does not exist");
  std::string meta_path = path + "/meta.json";
  if (!file_exists(meta_path)) throw CheckpointError(path + " is not a complete checkpoint (no meta.json)");
  Checkpoint c;
  c.path = path;
  std::string text;
  try {
    text = read_file(meta_path);
  } catch (const DataError& e) {
    throw CheckpointError(e.what());
  }
  c.meta = parse_checkpoint_meta(text, meta_path);
  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    std::string p = path + "/" + file;
    const CountedBytes counted = counted_file_bytes(p);  // (beside its tensors: allocator.h)
    std::string bytes;
    try {
      bytes = read_file(p);
    } catch (const DataError& e) {
      throw CheckpointError(std::string(e.what()) + " (incomplete checkpoint)");
    }
    auto recorded = c.meta.checksums.find(file);
    if (recorded == c.meta.checksums.end()) throw CheckpointError(meta_path + ": no checksum for " + file);
    const std::string& want = recorded->second;
    if (crc32_hex(bytes) != want) {
      throw CheckpointError(p + ": checksum mismatch (CRC-32 " + crc32_hex(bytes) + ", expected " + want +
                            "): the file is corrupt");
    }
    SafetensorsFile f = decode_safetensors(bytes, p);
    (std::string(file) == "model.safetensors" ? c.model : c.optimizer) = std::move(f.tensors);
  }
  return c;
}

std::string encode_checkpoint(const Checkpoint& ck) {
  StateDict all;
  for (const auto& [name, t] : ck.model) all.emplace_back("model/" + name, t);
  for (const auto& [name, t] : ck.optimizer) all.emplace_back("optimizer/" + name, t);
  return encode_safetensors(all, {{"meta", meta_to_json(ck.meta).dump()}});
}

Checkpoint decode_checkpoint(std::string_view bytes, const std::string& name) {
  SafetensorsFile f = decode_safetensors(bytes, name);
  auto meta = f.metadata.find("meta");
  if (meta == f.metadata.end()) throw CheckpointError(name + ": no checkpoint metadata");
  Checkpoint ck;
  ck.path = name;
  ck.meta = parse_checkpoint_meta(meta->second, name);
  for (auto& [key, t] : f.tensors) {
    if (key.rfind("model/", 0) == 0) {
      ck.model.emplace_back(key.substr(6), std::move(t));
    } else if (key.rfind("optimizer/", 0) == 0) {
      ck.optimizer.emplace_back(key.substr(10), std::move(t));
    } else {
      throw CheckpointError(name + ": tensor '" + key + "' is neither model/ nor optimizer/");
    }
  }
  return ck;
}

}  // namespace weft
