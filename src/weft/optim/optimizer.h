// Optimizer: updates named parameters from their gradients. Its state (momentum and
// moment buffers, step count) round-trips through state()/load_state() for checkpoints.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "weft/nn/module.h"
#include "weft/optim/state_store.h"

namespace weft {

class Optimizer {
 public:
  Optimizer(std::vector<std::pair<std::string, Var>> params, double lr);
  virtual ~Optimizer() = default;
  // Applies one update to every parameter that has a gradient.
  void step();
  // The same update, one parameter at a time (a streamed step: parameter offload, where a
  // parameter's value and gradient are in memory only in its turn): begin_updates with the
  // order the parameters will come in, update(k) for each (k: its index in the list the
  // optimizer was built over; one without a gradient is skipped), end_updates.
  void begin_updates(std::vector<std::size_t> order);
  void update(std::size_t k);
  void end_updates();
  virtual std::string name() const = 0;
  // Named state tensors, e.g. "momentum.1.weight".
  virtual StateDict state() const = 0;
  // Throws CheckpointError when a buffer is missing or has the wrong shape.
  virtual void load_state(const StateDict& state) = 0;

  void zero_grad();
  double lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }
  std::int64_t steps() const { return steps_; }
  void set_steps(std::int64_t s) { steps_ = s; }

  // Moves the buffers to a file in `dir`, read back ahead of each update (state_store.h).
  void offload_state(const std::string& dir, int slots = 3) { store_->offload(dir, slots); }
  // The buffers' bytes in memory now, and in all.
  std::int64_t state_resident_bytes() const { return store_->resident_bytes(); }
  std::int64_t state_total_bytes() const { return store_->total_bytes(); }
  std::int64_t state_largest_bytes() const { return store_->largest_bytes(); }
  // Offloaded: the memory of the state's slots goes until the next update (state_store.h).
  void release_state_memory() { store_->release_memory(); }

 protected:
  // One parameter's update: its value `w` (contiguous), gradient `g`, and its buffers (none
  // when the optimizer keeps none), at steps() (already counting this update).
  virtual void update_parameter(Tensor& w, const Tensor& g, Tensor* buffers) = 0;
  // `kinds` buffers per parameter, zero-initialized, named "<names[j]>.<param name>".
  void make_buffers(std::vector<std::string> names);
  StateDict export_buffers() const;
  void import_buffers(const StateDict& state);

  std::vector<std::pair<std::string, Var>> params_;
  std::unique_ptr<StateStore> store_ = std::make_unique<StateStore>();
  std::vector<std::string> buffer_names_;
  double lr_;
  std::int64_t steps_ = 0;
};

// Scales every gradient by min(1, max_norm / ‖g‖), ‖g‖ the L2 norm of all gradients together
// (torch.nn.utils.clip_grad_norm_). Returns ‖g‖ before clipping; max_norm <= 0 only measures.
double clip_grad_norm(const std::vector<Var>& params, double max_norm);

}  // namespace weft
