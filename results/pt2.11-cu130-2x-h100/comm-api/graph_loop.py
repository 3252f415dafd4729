# bare PyTorch: all_reduce captured 20 to a CUDA graph; timed as nccl-tests -G 20 (20 replays back
# to back, host clock) and as dlbench (events around each replay); per-iteration us, rank 0 prints.
import os, sys, time, statistics, torch, torch.distributed as dist
r = int(os.environ["LOCAL_RANK"]); torch.cuda.set_device(r)
dist.init_process_group("nccl", device_id=torch.device("cuda", r))
label = sys.argv[1] if len(sys.argv) > 1 else "default"
K = 20
for size in (262144, 1048576, 16777216):
    x = torch.ones(size // 4, device="cuda")
    for _ in range(5):
        dist.all_reduce(x)
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            dist.all_reduce(x)
    torch.cuda.current_stream().wait_stream(s); torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, capture_error_mode="thread_local"):
        for _ in range(K):
            dist.all_reduce(x)
    for _ in range(5):
        g.replay()
    torch.cuda.synchronize(); dist.barrier(); torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(20):
        g.replay()
    torch.cuda.synchronize()
    a = (time.perf_counter() - t0) / (20 * K) * 1e6
    ev = []
    for _ in range(20):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record(); g.replay(); e1.record(); e1.synchronize()
        ev.append(e0.elapsed_time(e1) * 1e3 / K)
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(20):
        g.replay()
    e1.record(); e1.synchronize()
    c = e0.elapsed_time(e1) * 1e3 / (20 * K)
    if r == 0:
        print(f"P3 {label:>14} {size:>9} B  back-to-back host {a:7.2f} us  events-per-replay median {statistics.median(ev):7.2f} us  back-to-back events {c:7.2f} us", flush=True)
    del g
dist.destroy_process_group()
