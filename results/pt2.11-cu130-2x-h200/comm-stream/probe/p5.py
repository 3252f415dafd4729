# Probe, second call: which part of torch.cuda.graph makes all_reduce slower than nccl-tests -G.
# Buffers (torch's caching allocator / a MemPool on ProcessGroupNCCL's ncclMemAlloc allocator) x
# capture and replay (torch.cuda.graph replayed on the default stream, on a side stream, on an
# own non-blocking stream; raw cudaStreamBeginCapture on an own stream replayed there, on the
# legacy default stream, on a torch pool stream) x communicator (an own ncclCommInitRank called
# out of place / ProcessGroupNCCL in place). Timed as nccl-tests times -G: host barrier, L
# launches of a graph of K calls, stream sync, / (L*K), averaged over ranks; rank 0 prints.
# torchrun --standalone --nproc-per-node 2 p5.py r1     (PYTHONPATH holding dlbench's src)
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


backend = dist.distributed_c10d._get_default_group()._get_backend(dev)
MP = torch.cuda.MemPool(backend.mem_allocator)
KEEP = []

def tensors(kind, size):
    if kind == "torch":
        a, b = torch.ones(size // 4, device=dev), torch.zeros(size // 4, device=dev)
    else:
        with torch.cuda.use_mem_pool(MP):
            a, b = torch.ones(size // 4, device=dev), torch.zeros(size // 4, device=dev)
    KEEP.append((a, b))
    return a, b

def measure(bufkind, method, via, size):
    a, b = tensors(bufkind, size)
    n = size // 4
    if via == "torch":
        def call(stream_ptr):
            dist.all_reduce(b)
    else:
        def call(stream_ptr):
            ck(lib.ncclAllReduce(a.data_ptr(), b.data_ptr(), n, 7, 0, comm.comm, vp(stream_ptr)), "ncclAllReduce")
    ext = torch.cuda.ExternalStream(own_stream.value, device=dev)
    pool_stream = torch.cuda.Stream(dev)
    cap = {"tg-default": None, "tg-side": None, "tg-ext": ext,
           "raw-own": ext, "raw-legacy": ext, "raw-pool": pool_stream}[method]
    warm = torch.cuda.Stream(dev); warm.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(warm):
        for _ in range(5):
            call(warm.cuda_stream)
    torch.cuda.current_stream().wait_stream(warm); torch.cuda.synchronize()
    if method.startswith("tg"):
        tg = torch.cuda.CUDAGraph()
        with torch.cuda.graph(tg, stream=cap, capture_error_mode="thread_local"):
            for _ in range(K):
                call(torch.cuda.current_stream().cuda_stream)
        rs = {"tg-default": torch.cuda.current_stream(), "tg-side": torch.cuda.Stream(dev), "tg-ext": ext}[method]
        def launch():
            with torch.cuda.stream(rs):
                tg.replay()
        sync, free = rs.synchronize, tg.reset
    else:
        s = cap.cuda_stream
        with torch.cuda.stream(cap):
            ck(rt.cudaStreamBeginCapture(vp(s), 1), "begin")
            g = vp()
            try:
                for _ in range(K):
                    call(s)
            except Exception:
                rt.cudaStreamEndCapture(vp(s), ctypes.byref(g))
                raise
            ck(rt.cudaStreamEndCapture(vp(s), ctypes.byref(g)), "end")
        ge = vp(); ck(rt.cudaGraphInstantiateWithFlags(ctypes.byref(ge), g, 0), "inst")
        ls = vp(0) if method == "raw-legacy" else vp(s)
        launch = lambda: ck(rt.cudaGraphLaunch(ge, ls), "launch")
        sync = lambda: ck(rt.cudaStreamSynchronize(ls), "sync")
        def free():
            rt.cudaGraphExecDestroy(ge); rt.cudaGraphDestroy(g)
    for _ in range(5):
        launch()
    sync()
    out, ev = [], []
    for _ in range(REPS):
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(L):
            launch()
        sync()
        dt = (time.perf_counter() - t0) / (L * K)
        x = torch.tensor([dt], dtype=torch.float64)
        dist.all_reduce(x)
        out.append(x.item() / world * 1e6)
    free()
    return out

SIZES = [1048576, 16777216, 67108864]
for via in ("own", "torch"):
    for bufkind in ("torch", "mempool"):
        for method in ("tg-default", "tg-side", "tg-ext", "raw-own", "raw-legacy", "raw-pool"):
            name = f"{bufkind}/{method}/{via}/{'in' if via == 'torch' else 'out'}"
            for size in SIZES:
                try:
                    us = measure(bufkind, method, via, size)
                    if r == 0:
                        med = statistics.median(us)
                        print(f"P5 {label} {name:<30} {size:>9} B  median {med:8.2f} us  min {min(us):8.2f} us  busbw {size / med / 1e3:7.2f} GB/s", flush=True)
                except Exception as exc:
                    if r == 0:
                        print(f"P5 {label} {name:<30} {size:>9} B  FAILED {type(exc).__name__}: {exc}", flush=True)
                    torch.cuda.synchronize()
                    break
            KEEP.clear()
dist.barrier()
comm.close()
