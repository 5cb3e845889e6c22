/* gpa-sim driver: the CUDA graph subset the CUDA backend uses (stream
 * capture, child-graph nodes, instantiate, child-node update, launch,
 * destroy), with faults.
 *
 * A stream's work is a list of closures, so capture is a list swap: while a
 * stream captures, what is pushed on it goes into the capture's list
 * (stream.cpp), one node per operation. Graphs here are chains: a node runs
 * after every node added before it, which is one valid order of any graph
 * the backend builds (it only ever chains nodes). An executable graph holds
 * one immutable snapshot of work per top-level node; a launch pushes one
 * operation that runs the snapshots of that moment in order, so an update
 * after a launch changes only later launches, as on a GPU. */
#include <map>
#include <memory>
#include "internal.h"

struct CUgraph_st {
  std::vector<CUgraphNode> nodes;
};
struct CUgraphNode_st {
  std::vector<gpa_sim_op> ops; /* a captured operation, or a child graph's, flattened */
  bool child = false;
  size_t child_nodes = 0; /* the child graph's node count: its topology, for updates */
};
using gpa_sim_work = std::shared_ptr<const std::vector<gpa_sim_op>>;
struct CUgraphExec_st {
  CUctx_st *ctx;
  std::vector<gpa_sim_work> parts; /* one per node of the graph, in order */
  std::map<CUgraphNode, size_t> index;
  std::vector<size_t> child_nodes;
};

namespace {
std::mutex g_mu; /* the live handles below */
std::set<CUgraph> g_graphs;
std::set<CUgraphExec> g_execs;
std::atomic<unsigned> g_fault[3];
std::atomic<size_t> g_launches{0}, g_captures{0}, g_updates{0};

bool take(int which) {
  unsigned n = g_fault[which].load();
  while (n) {
    if (g_fault[which].compare_exchange_weak(n, n - 1)) return n == 1;
  }
  return false;
}

bool graph_live(CUgraph g) {
  std::lock_guard<std::mutex> lk(g_mu);
  return g && g_graphs.count(g);
}

bool exec_live(CUgraphExec e) {
  std::lock_guard<std::mutex> lk(g_mu);
  return e && g_execs.count(e);
}

CUgraph graph_new(void) {
  CUgraph g = new CUgraph_st();
  std::lock_guard<std::mutex> lk(g_mu);
  g_graphs.insert(g);
  return g;
}

void graph_free(CUgraph g) {
  for (CUgraphNode n : g->nodes) delete n;
  delete g;
}

std::vector<gpa_sim_op> flatten(CUgraph g) {
  std::vector<gpa_sim_op> v;
  for (CUgraphNode n : g->nodes) v.insert(v.end(), n->ops.begin(), n->ops.end());
  return v;
}
} // namespace

void gpa_sim__graph_fault_set(int which, unsigned n) {
  if (which >= 0 && which < 3) g_fault[which] = n;
}

GPA_SIM_API void gpa_sim_fault_capture(unsigned n) { gpa_sim__opts(), gpa_sim__graph_fault_set(0, n); }
GPA_SIM_API void gpa_sim_fault_instantiate(unsigned n) { gpa_sim__opts(), gpa_sim__graph_fault_set(1, n); }
GPA_SIM_API void gpa_sim_fault_graph_launch(unsigned n) { gpa_sim__opts(), gpa_sim__graph_fault_set(2, n); }
GPA_SIM_API size_t gpa_sim_graph_launches(void) { return g_launches.load(); }
GPA_SIM_API size_t gpa_sim_graph_captures(void) { return g_captures.load(); }
GPA_SIM_API size_t gpa_sim_graph_updates(void) { return g_updates.load(); }

GPA_SIM_API CUresult cuStreamBeginCapture(CUstream h, CUstreamCaptureMode mode) {
  return gpa_sim__guard("cuStreamBeginCapture", [&]() -> CUresult {
    GPA_SIM_ENTER(ctx);
    CUstream_st *s;
    CUresult r = gpa_sim__stream_get(ctx, h, &s);
    if (r) return r;
    if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
        mode != CU_STREAM_CAPTURE_MODE_RELAXED)
      return CUDA_ERROR_INVALID_VALUE;
    if (s == ctx->null_stream)
      return gpa_sim__fail(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "cuStreamBeginCapture: the NULL stream cannot capture");
    if (take(0))
      return gpa_sim__fail(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "cuStreamBeginCapture: injected fault (capture refused)");
    std::lock_guard<std::mutex> lk(s->mu);
    if (s->cap) return gpa_sim__fail(CUDA_ERROR_ILLEGAL_STATE, "cuStreamBeginCapture: the stream is capturing already");
    s->cap = new std::vector<gpa_sim_op>();
    s->cap_invalid = false;
    return CUDA_SUCCESS;
  });
}

GPA_SIM_API CUresult cuStreamEndCapture(CUstream h, CUgraph *out) {
  return gpa_sim__guard("cuStreamEndCapture", [&]() -> CUresult {
    GPA_SIM_ENTER(ctx);
    CUstream_st *s;
    CUresult r = gpa_sim__stream_get(ctx, h, &s);
    if (r) return r;
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    *out = nullptr;
    std::unique_ptr<std::vector<gpa_sim_op>> ops;
    bool invalid;
    {
      std::lock_guard<std::mutex> lk(s->mu);
      if (!s->cap) return gpa_sim__fail(CUDA_ERROR_ILLEGAL_STATE, "cuStreamEndCapture: the stream is not capturing");
      ops.reset(s->cap);
      s->cap = nullptr;
      invalid = s->cap_invalid;
    }
    if (invalid)
      return gpa_sim__fail(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
                           "cuStreamEndCapture: the capture was invalidated by a synchronizing call");
    CUgraph g = graph_new();
    for (gpa_sim_op &op : *ops) {
      CUgraphNode n = new CUgraphNode_st();
      n->ops.push_back(std::move(op));
      g->nodes.push_back(n);
    }
    g_captures.fetch_add(1, std::memory_order_relaxed);
    *out = g;
    return CUDA_SUCCESS;
  });
}

GPA_SIM_API CUresult cuStreamIsCapturing(CUstream h, CUstreamCaptureStatus *st) {
  return gpa_sim__guard("cuStreamIsCapturing", [&]() -> CUresult {
    GPA_SIM_ENTER(ctx);
    CUstream_st *s;
    CUresult r = gpa_sim__stream_get(ctx, h, &s);
    if (r) return r;
    if (!st) return CUDA_ERROR_INVALID_VALUE;
    std::lock_guard<std::mutex> lk(s->mu);
    *st = !s->cap ? CU_STREAM_CAPTURE_STATUS_NONE
                  : s->cap_invalid ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    return CUDA_SUCCESS;
  });
}

GPA_SIM_API CUresult cuGraphCreate(CUgraph *out, unsigned int flags) {
  return gpa_sim__guard("cuGraphCreate", [&]() -> CUresult {
    GPA_SIM_ENTER(ctx);
    (void)ctx;
    if (!out || flags) return CUDA_ERROR_INVALID_VALUE;
    *out = graph_new();
    return CUDA_SUCCESS;
  });
}

GPA_SIM_API CUresult cuGraphDestroy(CUgraph g) {
  return gpa_sim__guard("cuGraphDestroy", [&]() -> CUresult {
    {
      std::lock_guard<std::mutex> lk(g_mu);
      if (!g || !g_graphs.erase(g)) return CUDA_ERROR_INVALID_HANDLE;
    }
    graph_free(g);
    return CUDA_SUCCESS;
  });
}

GPA_SIM_API CUresult cuGraphGetNodes(CUgraph g, CUgraphNode *nodes, size_t *n) {
  return gpa_sim__guard("cuGraphGetNodes", [&]() -> CUresult {
    if (!graph_live(g)) return CUDA_ERROR_INVALID_HANDLE;
    if (!n) return CUDA_ERROR_INVALID_VALUE;
    if (nodes)
      for (size_t i = 0; i < *n && i < g->nodes.size(); i++) nodes[i] = g->nodes[i];
    *n = g->nodes.size();
    return CUDA_SUCCESS;
  });
}

/* The child is copied, as the driver does: the caller may destroy it. */
GPA_SIM_API CUresult cuGraphAddChildGraphNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                                              CUgraph child) {
  return gpa_sim__guard("cuGraphAddChildGraphNode", [&]() -> CUresult {
    if (!out || (ndeps && !deps)) return CUDA_ERROR_INVALID_VALUE;
    if (!graph_live(g) || !graph_live(child) || g == child) return CUDA_ERROR_INVALID_HANDLE;
    for (size_t i = 0; i < ndeps; i++) {
      bool found = false;
      for (CUgraphNode n : g->nodes) found |= n == deps[i];
      if (!found) return gpa_sim__fail(CUDA_ERROR_INVALID_VALUE, "cuGraphAddChildGraphNode: a dependency is not a node of the graph");
    }
    for (CUgraphNode c : child->nodes)
      for (const gpa_sim_op &op : c->ops)
        if (op.mem_node)
          return gpa_sim__fail(CUDA_ERROR_NOT_SUPPORTED, "cuGraphAddChildGraphNode: the child graph holds a memory "
                                                         "allocation or free node (a captured cuMemAllocAsync or "
                                                         "cuMemFreeAsync, or cuBLAS without a workspace of its own)");
    CUgraphNode n = new CUgraphNode_st();
    n->ops = flatten(child);
    n->child = true;
    n->child_nodes = child->nodes.size();
    g->nodes.push_back(n);
    *out = n;
    return CUDA_SUCCESS;
  });
}

GPA_SIM_API CUresult cuGraphInstantiateWithFlags(CUgraphExec *out, CUgraph g, unsigned long long flags) {
  return gpa_sim__guard("cuGraphInstantiateWithFlags", [&]() -> CUresult {
    GPA_SIM_ENTER(ctx);
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    *out = nullptr;
    if (!graph_live(g)) return CUDA_ERROR_INVALID_HANDLE;
    if (flags & ~(unsigned long long)CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH) return CUDA_ERROR_INVALID_VALUE;
    if (take(1))
      return gpa_sim__fail(CUDA_ERROR_OUT_OF_MEMORY, "cuGraphInstantiateWithFlags: injected fault (instantiate failing)");
    auto e = std::make_unique<CUgraphExec_st>();
    e->ctx = ctx;
    for (size_t i = 0; i < g->nodes.size(); i++) {
      CUgraphNode n = g->nodes[i];
      e->parts.push_back(std::make_shared<const std::vector<gpa_sim_op>>(n->ops));
      e->child_nodes.push_back(n->child ? n->child_nodes : 0);
      e->index[n] = i;
    }
    std::lock_guard<std::mutex> lk(g_mu);
    g_execs.insert(e.get());
    *out = e.release();
    return CUDA_SUCCESS;
  });
}

GPA_SIM_API CUresult cuGraphExecDestroy(CUgraphExec e) {
  return gpa_sim__guard("cuGraphExecDestroy", [&]() -> CUresult {
    {
      std::lock_guard<std::mutex> lk(g_mu);
      if (!e || !g_execs.erase(e)) return CUDA_ERROR_INVALID_HANDLE;
    }
    delete e; /* launches in flight hold their own snapshots */
    return CUDA_SUCCESS;
  });
}

/* The node's work in e becomes child's; the topology (node count) must be
 * the one instantiated, else CUDA_ERROR_INVALID_VALUE and e is unchanged. */
GPA_SIM_API CUresult cuGraphExecChildGraphNodeSetParams(CUgraphExec e, CUgraphNode node, CUgraph child) {
  return gpa_sim__guard("cuGraphExecChildGraphNodeSetParams", [&]() -> CUresult {
    if (!exec_live(e) || !graph_live(child)) return CUDA_ERROR_INVALID_HANDLE;
    auto it = e->index.find(node);
    if (it == e->index.end() || !e->child_nodes[it->second])
      return gpa_sim__fail(CUDA_ERROR_INVALID_VALUE, "cuGraphExecChildGraphNodeSetParams: not a child-graph node of the graph");
    if (child->nodes.size() != e->child_nodes[it->second])
      return gpa_sim__failf(CUDA_ERROR_INVALID_VALUE, "cuGraphExecChildGraphNodeSetParams: the child graph has %zu "
                            "nodes, the instantiated one %zu (topology changed)", child->nodes.size(),
                            e->child_nodes[it->second]);
    e->parts[it->second] = std::make_shared<const std::vector<gpa_sim_op>>(flatten(child));
    g_updates.fetch_add(1, std::memory_order_relaxed);
    return CUDA_SUCCESS;
  });
}

/* One stream operation runs the whole graph: its operations in order, each
 * skipped after a sticky error unless it always runs (stream.cpp's rule). */
GPA_SIM_API CUresult cuGraphLaunch(CUgraphExec e, CUstream h) {
  return gpa_sim__guard("cuGraphLaunch", [&]() -> CUresult {
    GPA_SIM_ENTER(ctx);
    if (!exec_live(e)) return CUDA_ERROR_INVALID_HANDLE;
    CUstream_st *s;
    CUresult r = gpa_sim__stream_get(ctx, h, &s);
    if (r) return r;
    if (e->ctx != ctx) return CUDA_ERROR_INVALID_CONTEXT;
    if (take(2)) return gpa_sim__fail(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "cuGraphLaunch: injected fault (launch failing)");
    std::vector<gpa_sim_work> parts = e->parts;
    g_launches.fetch_add(1, std::memory_order_relaxed);
    gpa_sim__stream_push(s, [ctx, parts] {
      for (const gpa_sim_work &w : parts)
        for (const gpa_sim_op &op : *w) {
          if (ctx->sticky.load() && !op.always) continue;
          CUresult rr = op.fn();
          if (rr != CUDA_SUCCESS) gpa_sim__ctx_set_sticky(ctx, rr, "an operation of a graph failed");
        }
      return CUDA_SUCCESS;
    });
    return CUDA_SUCCESS;
  });
}
