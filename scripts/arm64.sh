#!/usr/bin/env bash
# scripts/arm64.sh [--rebuild] [--build-only] [--timeout SECONDS] [--cpus N] [COMMAND [ARGS...]]
#
# Runs COMMAND on an emulated arm64 Linux machine (qemu-system-aarch64, virt board, 2 CPUs or
# --cpus N, multi-threaded TCG): Debian bookworm arm64 with Python, gcc, uftrace and ada's dependencies
# from their aarch64 wheels. Full-system emulation because Frida needs ptrace, which qemu-user
# does not emulate. Inside, the repository and /tmp are mounted (9p) at the same paths as here,
# the working directory is the repository, `ada` runs this checkout, and COMMAND's exit status
# is this script's. With no COMMAND it runs the arm64 test subset (scripts/arm64-tests.sh).
#
# The image is built once (6 to 11 minutes here: debootstrap under qemu-user, then pip) and cached
# in $ADA_ARM64_CACHE (default ~/.cache/ada-arm64) under a key made from its recipe: the base
# (packages, kernel, guest init) and the Python layer (pyproject's dependencies) are keyed apart,
# so a dependency change rebuilds only the second. Every run boots a throwaway overlay: the cached
# image is never written. The VM is stopped whatever happens (exit, timeout, Ctrl-C).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${ADA_ARM64_CACHE:-$HOME/.cache/ada-arm64}
TIMEOUT=${ADA_ARM64_TIMEOUT:-5400}
CPUS=2
REBUILD=0
BUILD_ONLY=0
while [ $# -gt 0 ]; do
    case $1 in
        --rebuild) REBUILD=1; shift ;;
        --build-only) BUILD_ONLY=1; shift ;;
        --timeout) TIMEOUT=$2; shift 2 ;;
        --cpus) CPUS=$2; shift 2 ;;
        -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        --) shift; break ;;
        *) break ;;
    esac
done

say() { printf 'arm64: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 2; }

case $REPO in *[[:space:]]*) die "the repository path has a space in it ($REPO); the guest's kernel command line cannot carry it" ;; esac
[ "$(id -u)" = 0 ] || die "needs root (debootstrap, binfmt, and mounts of the image's root while it is built)"

# ---- the recipe -----------------------------------------------------------------------------
SUITE=bookworm
MIRROR=http://deb.debian.org/debian
# Packages of the guest. linux-image-arm64 is installed after the initramfs is configured.
PACKAGES=python3,python3-venv,python3-dev,gcc,g++,libc6-dev,make,kmod,procps,iproute2,\
ca-certificates,uftrace,sqlite3,libsqlite3-dev,zstd,initramfs-tools,util-linux
# Modules the guest's initramfs loads: the disk, its file system, the 9p shares.
INITRAMFS_MODULES="virtio_pci virtio_mmio virtio_blk ext4 9pnet_virtio 9p"
# PID 1 of the guest: mounts what a process needs, the two 9p shares, then hands over to the
# repository's own scripts/arm64-guest.sh (so the guest's behaviour changes without a rebuild).
read -r -d '' GUEST_INIT <<'EOF' || true
#!/bin/sh
# ada's arm64 guest init (built into the image by scripts/arm64.sh).
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
mountpoint -q /proc || mount -t proc proc /proc
mountpoint -q /sys || mount -t sysfs sysfs /sys
mountpoint -q /dev || mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
mount -t tmpfs tmpfs /run
dmesg -n 1
for arg in $(cat /proc/cmdline); do
    case $arg in
        ada.repo=*) REPO=${arg#ada.repo=} ;;
        ada.run=*) RUN=${arg#ada.run=} ;;
    esac
done
modprobe 9pnet_virtio 2>/dev/null; modprobe 9p 2>/dev/null
opts=trans=virtio,version=9p2000.L,msize=524288,cache=loose
mount -t 9p -o $opts ada_tmp /tmp && mkdir -p "$REPO" && mount -t 9p -o $opts ada_repo "$REPO"
if [ -f "$REPO/scripts/arm64-guest.sh" ]; then
    /bin/sh "$REPO/scripts/arm64-guest.sh" "$REPO" "$RUN"
else
    echo "arm64 guest: cannot see $REPO/scripts/arm64-guest.sh (9p share)" > /dev/console
fi
sync
echo o > /proc/sysrq-trigger
sleep 60
EOF

# The Python layer: pyproject's dependencies and its test extra, as pip requirements.
python_requirements() {
    python3 - "$REPO/pyproject.toml" <<'EOF'
import sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
print("\n".join(project["dependencies"] + project["optional-dependencies"]["test"]))
EOF
}

key() { sha256sum | cut -c1-16; }
BASE_KEY=$(printf '%s\n' base-1 "$SUITE" "$PACKAGES" "$INITRAMFS_MODULES" "$GUEST_INIT" | key)
PY_KEY=$(printf '%s\n' "$BASE_KEY" python-1 "$(python_requirements)" | key)
BASE=$CACHE/base-$BASE_KEY
IMAGE=$CACHE/image-$PY_KEY

# ---- building -------------------------------------------------------------------------------
host_tools() {
    local missing=()
    command -v qemu-system-aarch64 >/dev/null || missing+=(qemu-system-arm)
    command -v qemu-img >/dev/null || missing+=(qemu-utils)
    command -v debootstrap >/dev/null || missing+=(debootstrap)
    [ -x /usr/bin/qemu-aarch64-static ] || missing+=(qemu-user-static)
    command -v update-binfmts >/dev/null || missing+=(binfmt-support)
    command -v mkfs.ext4 >/dev/null || missing+=(e2fsprogs)
    if [ ${#missing[@]} -gt 0 ]; then
        command -v apt-get >/dev/null || die "missing ${missing[*]} and no apt-get to install them"
        say "installing ${missing[*]} (apt-get)"
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
}

binfmt() {
    # debootstrap's second stage and pip run arm64 programs on this x86_64 host through qemu-user.
    if [ ! -e /proc/sys/fs/binfmt_misc/status ]; then
        mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc || die "cannot mount binfmt_misc"
    fi
    [ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || update-binfmts --enable qemu-aarch64 \
        || die "cannot register qemu-aarch64 with binfmt_misc"
}

in_root() { chroot "$1" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    DEBIAN_FRONTEND=noninteractive "${@:2}"; }

build_base() {
    local root=$BASE.tmp/root started=$SECONDS
    rm -rf "$BASE.tmp"; mkdir -p "$BASE.tmp"
    say "building the base image $BASE_KEY (debootstrap $SUITE arm64; about 4 minutes)"
    debootstrap --arch=arm64 --variant=minbase --include="$PACKAGES" "$SUITE" "$root" "$MIRROR" \
        > "$BASE.tmp/debootstrap.log" 2>&1 &
    local pid=$!
    while kill -0 $pid 2>/dev/null; do
        sleep 30
        say "  debootstrap: $(grep -E '^I: (Retrieving|Validating|Extracting|Unpacking|Configuring|Installing)' \
            "$BASE.tmp/debootstrap.log" | tail -1 | cut -c1-60) ($((SECONDS - started)) s)"
    done
    wait $pid || { tail -20 "$BASE.tmp/debootstrap.log" >&2; die "debootstrap failed (log: $BASE.tmp/debootstrap.log)"; }
    # The kernel, with an initramfs that holds only what this machine needs (built once).
    mkdir -p "$root/etc/initramfs-tools/conf.d"
    printf 'MODULES=list\nCOMPRESS=zstd\n' > "$root/etc/initramfs-tools/conf.d/ada"
    printf '%s\n' $INITRAMFS_MODULES >> "$root/etc/initramfs-tools/modules"
    say "  kernel and initramfs ($((SECONDS - started)) s)"
    cp /etc/resolv.conf "$root/etc/resolv.conf"
    in_root "$root" apt-get install -y -qq --no-install-recommends linux-image-arm64 \
        > "$BASE.tmp/kernel.log" 2>&1 || { tail -20 "$BASE.tmp/kernel.log" >&2; die "kernel install failed"; }
    in_root "$root" apt-get clean
    printf '%s\n' "$GUEST_INIT" > "$root/sbin/ada-init"; chmod 755 "$root/sbin/ada-init"
    echo ada-arm64 > "$root/etc/hostname"
    printf '127.0.0.1 localhost ada-arm64\n::1 localhost\n' > "$root/etc/hosts"
    mv "$BASE.tmp" "$BASE"
    say "base image built in $((SECONDS - started)) s"
}

build_image() {
    local root=$BASE/root started=$SECONDS
    say "building the Python layer $PY_KEY (pip, aarch64 wheels)"
    rm -rf "$IMAGE.tmp" "$root/opt/ada-venv"; mkdir -p "$IMAGE.tmp"
    python_requirements > "$root/tmp/requirements.txt"
    # The host's CA bundle: TLS may be intercepted on the way to the package index.
    cp "${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}" "$root/tmp/host-ca.crt"
    cp /etc/resolv.conf "$root/etc/resolv.conf"
    in_root "$root" python3 -m venv /opt/ada-venv
    in_root "$root" env PIP_CERT=/tmp/host-ca.crt PIP_DISABLE_PIP_VERSION_CHECK=1 \
        /opt/ada-venv/bin/pip install --quiet --only-binary=:all: -r /tmp/requirements.txt \
        > "$IMAGE.tmp/pip.log" 2>&1 || { tail -20 "$IMAGE.tmp/pip.log" >&2; die "pip in the guest failed"; }
    rm -f "$root/tmp/requirements.txt" "$root/tmp/host-ca.crt"
    local kernel initrd
    kernel=$(ls "$root"/boot/vmlinuz-* | sort -V | tail -1)
    initrd=$(ls "$root"/boot/initrd.img-* | sort -V | tail -1)
    cp "$kernel" "$IMAGE.tmp/vmlinuz"; cp "$initrd" "$IMAGE.tmp/initrd.img"
    mkfs.ext4 -q -L ada-arm64 -d "$root" "$IMAGE.tmp/disk.img" 6G
    mv "$IMAGE.tmp" "$IMAGE"
    say "image built in $((SECONDS - started)) s: $IMAGE"
}

build() {
    mkdir -p "$CACHE"
    exec 9> "$CACHE/.lock"
    flock 9   # one builder at a time
    if [ $REBUILD = 1 ]; then rm -rf "$BASE" "$IMAGE"; REBUILD=0; fi
    [ -f "$IMAGE/disk.img" ] && return
    host_tools
    binfmt
    [ -d "$BASE/root" ] || build_base
    build_image
    # Older keys' images are stale: remove them.
    find "$CACHE" -maxdepth 1 \( -name 'base-*' -o -name 'image-*' \) \
        ! -name "base-$BASE_KEY" ! -name "image-$PY_KEY" -exec rm -rf {} +
}

# ---- running --------------------------------------------------------------------------------
RUN_DIR= QEMU_PID=
cleanup() {
    if [ -n "$QEMU_PID" ]; then kill "$QEMU_PID" 2>/dev/null || true; wait "$QEMU_PID" 2>/dev/null || true; fi
    [ -z "$RUN_DIR" ] || rm -rf "$RUN_DIR"
}

run() {
    local run status
    run=$(mktemp -d /tmp/ada-arm64.XXXXXX); RUN_DIR=$run
    if [ $# -eq 0 ]; then set -- bash scripts/arm64-tests.sh; fi
    printf '%q ' "$@" > "$run/command"
    printf '%q' "$PWD" > "$run/cwd"
    local name
    for name in $(compgen -e | grep -E '^(ADA_|PYTEST_|CI$)'); do   # passed on to the command
        printf 'export %s=%q\n' "$name" "${!name}"
    done > "$run/env"
    [ -t 1 ] || echo 'export PY_COLORS=0 NO_COLOR=1' >> "$run/env"   # the guest sees a terminal
    trap cleanup EXIT
    trap 'say "interrupted"; exit 130' INT TERM
    local cpu=max,pauth-impdef=on,pmu=off  # the guest kernel oopsed in perf_pmu_disable under uftrace with the emulated PMU
    qemu-system-aarch64 -M virt -cpu $cpu -accel tcg,thread=multi -smp "$CPUS" -m 4096 \
        -display none -monitor none -serial stdio -no-reboot \
        -kernel "$IMAGE/vmlinuz" -initrd "$IMAGE/initrd.img" \
        -append "console=ttyAMA0 root=/dev/vda rw quiet loglevel=1 init=/sbin/ada-init ada.repo=$REPO ada.run=$run" \
        -drive "file=$IMAGE/disk.img,format=raw,if=virtio,snapshot=on" \
        -virtfs "local,path=/tmp,mount_tag=ada_tmp,security_model=passthrough,id=tmp" \
        -virtfs "local,path=$REPO,mount_tag=ada_repo,security_model=passthrough,id=repo" \
        < /dev/null &
    QEMU_PID=$!
    local waited=0
    while kill -0 $QEMU_PID 2>/dev/null; do
        sleep 1; waited=$((waited + 1))
        if [ $waited -ge "$TIMEOUT" ]; then say "timed out after $TIMEOUT s; stopping the VM"; break; fi
    done
    if [ -f "$run/status" ]; then status=$(cat "$run/status"); else
        say "the guest stopped without an exit status (a kernel panic or a timeout)"; status=3; fi
    return "$status"
}

build
[ $BUILD_ONLY = 1 ] || run "$@"
