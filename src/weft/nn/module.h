// Module: the base of every layer and model. A module owns named parameters (Vars that
// require gradients) and named child modules; named_parameters() walks them with dotted
// names ("0.weight", "features.3.bias"), which are also the keys of the state dict.
#pragma once

#include <functional>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "weft/autograd/variable.h"
#include "weft/tensor/rng.h"

namespace weft {

using StateDict = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  virtual ~Module() = default;
  virtual Var forward(const Var& x) = 0;
  Var operator()(const Var& x) { return forward(x); }
  // A one-line description, e.g. "Linear(784 -> 256)".
  virtual std::string describe() const = 0;

  std::vector<std::pair<std::string, Var>> named_parameters() const;
  std::vector<Var> parameters() const;
  std::int64_t num_parameters() const;
  // Random generators owned by modules (dropout), by dotted name, for checkpoints.
  std::vector<std::pair<std::string, Rng*>> named_rngs();

  StateDict state_dict() const;  // copies of the parameter values
  // Loads values by name; throws CheckpointError naming the first missing, unexpected or
  // wrongly shaped entry.
  void load_state_dict(const StateDict& state);

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  void zero_grad();
  // The module tree, one line per module, indented.
  std::string summary() const;

  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const { return children_; }

  // Models built of repeated layers (a GPT's blocks) name the parameters of each layer by
  // the prefix they share ("h0.", "h1.", ...), in forward order, and call a hook before
  // (after = false) and after each layer's forward; ZeRO-3 gathers a layer's parameters
  // there. Other models have no layers and ignore the hook.
  using LayerHook = std::function<void(std::int64_t layer, bool after)>;
  virtual std::vector<std::string> layer_prefixes() const { return {}; }
  virtual void set_layer_hook(LayerHook hook) {}

 protected:
  // Returns a handle sharing the registered parameter.
  Var register_parameter(const std::string& name, Tensor value);
  void register_module(const std::string& name, std::shared_ptr<Module> module);
  void register_rng(const std::string& name, Rng* rng);

 private:
  void collect_parameters(const std::string& prefix, std::vector<std::pair<std::string, Var>>& out) const;
  void collect_rngs(const std::string& prefix, std::vector<std::pair<std::string, Rng*>>& out);
  void write_summary(const std::string& name, int depth, std::string& out) const;

  std::vector<std::pair<std::string, Var>> params_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  std::vector<std::pair<std::string, Rng*>> rngs_;
  bool training_ = true;
};

}  // namespace weft
