#include "weft/nn/activation.h"

#include "weft/autograd/functions.h"

namespace weft {

Var ReLU::forward(const Var& x) { return relu(x); }
Var Sigmoid::forward(const Var& x) { return sigmoid(x); }
Var Tanh::forward(const Var& x) { return tanh(x); }
Var Softmax::forward(const Var& x) { return softmax(x); }
Var LogSoftmax::forward(const Var& x) { return log_softmax(x); }

}  // namespace weft
