#pragma once
// The one list of octopt's optimizers, in the order of their stored numbers (state files and the XLA handlers'
// `kind` attribute keep them: a new optimizer goes at the end). From it come the OptimKind enum and its count
// (config.hpp) and every dispatch over the kinds (visit_optim, optim_rules.hpp); each entry's definition is
// OptimRule<OptimKind::name> in rules/<name>.hpp, which optim_rules.hpp includes. An entry without its rule, or a
// rule without its entry, does not compile.
#define OCTOPT_OPTIMIZERS(X) \
  X(adam)                    \
  X(adamw)                   \
  X(sgd)                     \
  X(rmsprop)                 \
  X(adagrad)                 \
  X(lion)                    \
  X(ademamix)                \
  X(lamb)                    \
  X(lars)                    \
  X(radam)                   \
  X(nadam)                   \
  X(muon)                    \
  X(adan)
