# The attention table of tools/gpu_attention.sh: bench_ops' JSON lines (argv[1]) next to the
# SDPA peers of tools/attention_peers.py (argv[2], may be missing), one row per lancet case,
# with lancet / cuDNN where cuDNN ran the same (queries, keys) shape.
import json
import re
import sys


def read_json_lines(path, prefix=""):
    rows = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if prefix:
                    if not line.startswith(prefix):
                        continue
                    line = line[len(prefix):]
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        pass
    return rows


def main():
    ours = read_json_lines(sys.argv[1], "JSON ")
    peers = read_json_lines(sys.argv[2]) if len(sys.argv) > 2 else []
    peer = {(p["backend"], p["q"], p["ctx"]): p["tflops"] for p in peers if "tflops" in p}
    print(f"{'case':<34} {'lancet':>16} {'cuDNN':>10} {'FA2':>10} {'lancet/cuDNN':>13}")
    for r in ours:
        m = re.match(r"b=(\d+) ctx=(\d+) q=(\d+)(.*)", r["case"])
        if not m:
            continue
        q, ctx = int(m.group(3)), int(m.group(2))
        val = f"{r['achieved']:.0f} {r['unit']}"
        if r["kind"] != "attn-pre":
            print(f"{r['case']:<34} {val:>16}")
            continue
        cd, fa = peer.get(("cudnn", q, ctx)), peer.get(("flash", q, ctx))
        fp8 = bool(m.group(4).strip())
        ratio = f"{r['achieved'] / cd:.2f}" if cd and not fp8 else ""
        cds = f"{cd:.0f}" if cd else "-"
        fas = f"{fa:.0f}" if fa else "-"
        print(f"{r['case']:<34} {val:>16} {cds:>10} {fas:>10} {ratio:>13}")
    ran = set()
    for r in ours:
        m = re.match(r"b=\d+ ctx=(\d+) q=(\d+)", r["case"])
        if m:
            ran.add((int(m.group(2)), int(m.group(1))))
    for q, c in sorted({(q, c) for (_, q, c) in peer} - ran):
        cd, fa = peer.get(("cudnn", q, c)), peer.get(("flash", q, c))
        cds = f"{cd:.0f}" if cd else "-"
        fas = f"{fa:.0f}" if fa else "-"
        print(f"{'(peers only) q=%d ctx=%d' % (q, c):<34} {'-':>16} {cds:>10} {fas:>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
