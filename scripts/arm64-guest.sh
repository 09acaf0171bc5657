#!/bin/sh
# Runs inside the arm64 guest that scripts/arm64.sh boots, called by the image's /sbin/ada-init
# once /tmp and the repository are mounted: REPO is the repository's path (the same as on the
# host), RUN the host's per-run folder (under /tmp) holding the command, its working directory
# and the environment to pass on. Writes the command's exit status to RUN/status; init then
# powers the machine off. Kept in the repository, not the image, so changing it needs no rebuild.
REPO=$1
RUN=$2
stty -onlcr < /dev/console 2>/dev/null   # the host reads a plain byte stream, not a terminal's
ip link set lo up
hostname ada-arm64

# ada as installed: this checkout on the image venv's path, and `ada` on PATH.
mkdir -p /opt/ada-src
ln -sfn "$REPO" /opt/ada-src/ada
site=$(/opt/ada-venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo /opt/ada-src > "$site/ada-checkout.pth"
cat > /usr/local/bin/ada <<'EOF'
#!/opt/ada-venv/bin/python
from ada.__main__ import main
main()
EOF
chmod 755 /usr/local/bin/ada

# Temporary files on the guest's own disk: 9p cannot hold an unlinked open file (pytest's capture)
# nor, reliably, the FIFOs and sockets Frida makes. /tmp is still the host's, for paths named.
# Bytecode is kept on the guest's disk, not written into the shared checkout: compiling ada's
# modules afresh at each of the subset's hundreds of `python -m ada` starts would cost seconds.
export HOME=/root LANG=C.UTF-8 PYTHONPYCACHEPREFIX=/var/tmp/pycache ADA_ARM64_GUEST=1 TMPDIR=/var/tmp
export PATH=/opt/ada-venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
echo "arm64 guest up: $(uname -sr), $(nproc) CPUs, $(python3 --version)" > /dev/console
# A process the kernel kills with a core-dumping signal (SIGSEGV, SIGBUS, SIGILL, SIGABRT...)
# is named on the console as it happens, with its pid, name, pc and lr: a program that dies under
# a test, not only the ones the tests crash on purpose, then says how and where.
sysctl -q -w kernel.print-fatal-signals=1
dmesg --follow --notime 2>/dev/null \
    | grep --line-buffered -E 'fatal signal| PID: [0-9]+ Comm: |^(pc|lr) : ' \
    | sed -u 's/^/arm64 kernel: /' > /dev/console &
# RUN's files are written by the host's bash with printf %q: bash reads them back.
/bin/bash -c ". $RUN/env && cd $(cat "$RUN/cwd") && $(cat "$RUN/command")" < /dev/null \
    > /dev/console 2>&1
echo $? > "$RUN/status"
sync
