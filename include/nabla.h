/* nabla.h: the whole public API of nabla, a deep learning framework in C.
 * Conventions (ownership, errors, scopes) are in nabla/core.h. */
#ifndef NABLA_H
#define NABLA_H

#include "nabla/core.h"
#include "nabla/tensor.h"
#include "nabla/ops.h"
#include "nabla/autograd.h"
#include "nabla/io.h"
#include "nabla/loss.h"
#include "nabla/data.h"
#include "nabla/optim.h"
#include "nabla/nn.h"
#include "nabla/rnn.h"
#include "nabla/module.h"
#include "nabla/layers.h"
#include "nabla/models.h"
#include "nabla/cuda.h"
#include "nabla/profiler.h"
#include "nabla/dist.h"

#endif
