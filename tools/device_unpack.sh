# Sourced on the GPU machine from the repository root after tools/device_pack.sh's archive was
# carried there in devrun/: unpacks it to /tmp/x (once per machine), puts its libraries on
# LD_LIBRARY_PATH and links /work/shared to its fixtures: the tests look in LANCET_SHARED_DIR, the
# checkout's ../shared by default, which is /work/shared for builds made in /work/main.
#   source tools/device_unpack.sh && /tmp/x/new/tests/test_backend_cuda
mkdir -p /tmp/x
[[ -f /tmp/x/.unpacked ]] || { tar -xJf devrun/pack.tar.xz -C /tmp/x && touch /tmp/x/.unpacked; }
export LD_LIBRARY_PATH=/tmp/x/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
mkdir -p /work && { [[ -e /work/shared ]] || ln -s /tmp/x/shared /work/shared; }
# NVLink multicast stays off on shared hosts.
export NCCL_NVLS_ENABLE=0
