# Probe: which of buffers (cudaMalloc / ncclMemAlloc / torch's caching allocator), capture
# (raw cudaStreamBeginCapture on an own non-blocking stream / torch.cuda.graph) and communicator
# (own ncclCommInitRank / torch's ProcessGroupNCCL) makes all_reduce under a CUDA graph slower
# than nccl-tests -G. Timed as nccl-tests times -G: host barrier, L launches of a graph of K
# calls, stream sync, / (L*K), averaged over ranks. Rank 0 prints one line per variant and size.
# torchrun --standalone --nproc-per-node 2 p4.py r1     (PYTHONPATH holding dlbench's src)
import ctypes, os, statistics, sys, time, traceback
import torch, torch.distributed as dist
from dlbench.workloads import nccl_api

r, world = int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
torch.cuda.set_device(r)
dev = torch.device("cuda", r)
dist.init_process_group("cpu:gloo,cuda:nccl", device_id=dev)
label = sys.argv[1] if len(sys.argv) > 1 else "p4"
K, L, REPS = 20, 20, 5
SIZES = [int(s) for s in os.environ.get("P4_SIZES", "262144,1048576,4194304,16777216,67108864").split(",")]
MAXB = max(SIZES)

def cudart():
    for line in open("/proc/self/maps"):
        if "libcudart.so" in line:
            return ctypes.CDLL(line.split()[-1])
    return ctypes.CDLL("libcudart.so")

rt = cudart()
vp, P = ctypes.c_void_p, ctypes.POINTER
for name, args in {"cudaStreamCreateWithFlags": [P(vp), ctypes.c_uint],
                   "cudaMalloc": [P(vp), ctypes.c_size_t],
                   "cudaMemset": [vp, ctypes.c_int, ctypes.c_size_t],
                   "cudaStreamBeginCapture": [vp, ctypes.c_int],
                   "cudaStreamEndCapture": [vp, P(vp)],
                   "cudaGraphInstantiateWithFlags": [P(vp), vp, ctypes.c_ulonglong],
                   "cudaGraphLaunch": [vp, vp], "cudaStreamSynchronize": [vp],
                   "cudaGraphExecDestroy": [vp], "cudaGraphDestroy": [vp],
                   "cudaDeviceSynchronize": []}.items():
    f = getattr(rt, name); f.argtypes, f.restype = args, ctypes.c_int

def ck(res, what):
    if res != 0:
        raise RuntimeError(f"{what} -> {res}")

lib = nccl_api.library()
lib.ncclMemAlloc.argtypes, lib.ncclMemAlloc.restype = [P(vp), ctypes.c_size_t], ctypes.c_int
comm = nccl_api.Communicator.over_process_group(r, world, dev)
own_stream = vp(); ck(rt.cudaStreamCreateWithFlags(ctypes.byref(own_stream), 1), "stream")

def raw_alloc(kind):
    p = vp()
    if kind == "cudamalloc":
        ck(rt.cudaMalloc(ctypes.byref(p), MAXB), "cudaMalloc")
    else:
        ck(lib.ncclMemAlloc(ctypes.byref(p), MAXB), "ncclMemAlloc")
    ck(rt.cudaMemset(p, 0, MAXB), "memset")
    return p.value

RAW = {k: (raw_alloc(k), raw_alloc(k)) for k in ("cudamalloc", "ncclmem")}
rt.cudaDeviceSynchronize()

backend = dist.distributed_c10d._get_default_group()._get_backend(dev)
POOLS = {}
def pool(register):
    if register not in POOLS:
        p = torch.cuda.MemPool(backend.mem_allocator)
        if register:
            with torch.cuda.use_mem_pool(p):
                torch.empty(MAXB // 4, device=dev)  # a segment to register
            backend.register_mem_pool(p)
        POOLS[register] = p
    return POOLS[register]

def buffers(kind, size):
    if kind in RAW:
        return RAW[kind]
    if kind == "torch":
        a, b = torch.ones(size // 4, device=dev), torch.zeros(size // 4, device=dev)
    else:  # mempool / mempool-reg
        with torch.cuda.use_mem_pool(pool(kind == "mempool-reg")):
            a, b = torch.ones(size // 4, device=dev), torch.zeros(size // 4, device=dev)
    buffers.keep = (a, b)
    return a.data_ptr(), b.data_ptr()

def measure(bufkind, capture, via, inplace, size):
    send, recv = buffers(bufkind, size)
    if inplace:
        send = recv
    n = size // 4
    if via == "torch":
        assert bufkind not in RAW
        t = buffers.keep[1]  # torch's all_reduce works in place
        def call():
            dist.all_reduce(t)
    else:
        def call(stream):
            ck(lib.ncclAllReduce(send, recv, n, 7, 0, comm.comm, stream), "ncclAllReduce")
    if capture == "raw":
        s = own_stream
        for _ in range(5):
            call(s)
        ck(rt.cudaStreamSynchronize(s), "sync")
        ck(rt.cudaStreamBeginCapture(s, 1), "begin")  # thread-local, as nccl-tests
        for _ in range(K):
            call(s)
        g = vp(); ck(rt.cudaStreamEndCapture(s, ctypes.byref(g)), "end")
        ge = vp(); ck(rt.cudaGraphInstantiateWithFlags(ctypes.byref(ge), g, 0), "inst")
        launch = lambda: ck(rt.cudaGraphLaunch(ge, s), "launch")
        sync = lambda: ck(rt.cudaStreamSynchronize(s), "sync")
        def free():
            rt.cudaGraphExecDestroy(ge); rt.cudaGraphDestroy(g)
    else:
        side = torch.cuda.Stream(dev); side.wait_stream(torch.cuda.current_stream())
        one = (lambda: call()) if via == "torch" else (lambda: call(vp(torch.cuda.current_stream().cuda_stream)))
        with torch.cuda.stream(side):
            for _ in range(5):
                one()
        torch.cuda.current_stream().wait_stream(side); torch.cuda.synchronize()
        tg = torch.cuda.CUDAGraph()
        with torch.cuda.graph(tg, capture_error_mode="thread_local"):
            for _ in range(K):
                one()
        launch, sync = tg.replay, torch.cuda.synchronize
        free = tg.reset
    for _ in range(5):
        launch()
    sync()
    out = []
    for _ in range(REPS):
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(L):
            launch()
        sync()
        dt = (time.perf_counter() - t0) / (L * K)
        x = torch.tensor([dt], dtype=torch.float64)
        dist.all_reduce(x)  # gloo: CPU tensor
        out.append(x.item() / world * 1e6)
    free()
    return out

VARIANTS = [  # buffers, capture, communicator, in place
    ("ncclmem", "raw", "own", False), ("ncclmem", "raw", "own", True),
    ("cudamalloc", "raw", "own", False), ("torch", "raw", "own", False),
    ("ncclmem", "torch", "own", False), ("torch", "torch", "own", False),
    ("torch", "torch", "own", True),
    ("torch", "torch", "torch", True), ("mempool", "torch", "torch", True),
    ("mempool-reg", "torch", "torch", True),
]
only = os.environ.get("P4_ONLY")
for v in VARIANTS:
    name = "/".join([v[0], v[1], v[2], "in" if v[3] else "out"])
    if only and name not in only.split(","):
        continue
    for size in SIZES:
        try:
            us = measure(*v, size)
            if r == 0:
                med = statistics.median(us)
                bw = size / med / 1e3
                print(f"P4 {label} {name:<28} {size:>9} B  median {med:8.2f} us  min {min(us):8.2f} us  busbw {bw:7.2f} GB/s", flush=True)
        except Exception as exc:
            if r == 0:
                print(f"P4 {label} {name:<28} {size:>9} B  FAILED {type(exc).__name__}: {exc}", flush=True)
                traceback.print_exc()
            break
dist.barrier()
comm.close()
dist.destroy_process_group()
