/* gpuactor: an actor-model GPU scheduler. One header for everything. */
#ifndef GPUACTOR_H
#define GPUACTOR_H
#include "gpuactor/version.h"
#include "gpuactor/limits.h"
#include "gpuactor/status.h"
#include "gpuactor/tensor.h"
#include "gpuactor/actor.h"
#include "gpuactor/handle.h"
#include "gpuactor/op.h"
#include "gpuactor/feed.h"
#include "gpuactor/comm.h"
#include "gpuactor/external.h"
#include "gpuactor/plugin.h"
#include "gpuactor/profile.h"
#include "gpuactor/ops_basic.h"
#include "gpuactor/ops_linear.h"
#include "gpuactor/ops_attention.h"
#endif
