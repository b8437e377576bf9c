#!/bin/bash
# orch first-boot set-up of a GPU box (rendered into user data by orchestrator/provision/userdata.py).
#
# 1. Installs the box's expiry: orch-expire.timer powers the box off at ORCH_EXPIRES_AT (UTC);
#    AWS then terminates it (instance_initiated_shutdown_behavior = terminate). Done first, so a
#    failed driver install still cannot leak a box.
# 2. Installs the NVIDIA driver (and CUDA toolkit) only when nvidia-smi is absent: Deep Learning
#    images already have them. Ubuntu 22.04/24.04, Amazon Linux 2023, Alibaba Cloud Linux 3.
# 3. Writes /var/lib/orch/ready (or /var/lib/orch/failed with the reason) for `orch check`.
#
# Idempotent: once the ready marker exists a re-run does nothing. Everything goes to
# /var/log/orch-install-drivers.log. All paths sit under ORCH_ROOT (default "") so tests can run
# the script against a temporary root with stub commands on PATH.
#
# Settings (environment): ORCH_EXPIRES_AT (YYYY-MM-DDTHH:MM:SSZ or empty), ORCH_CLOUD,
# ORCH_DRIVER_BRANCH (Ubuntu "-server" driver branch, default 570), ORCH_DNF_DRIVER_STREAM
# (dnf module stream, default latest-dkms), ORCH_INSTALL_CUDA (1 = also the CUDA toolkit).
set -Eeuo pipefail

ORCH_ROOT="${ORCH_ROOT:-}"
ORCH_EXPIRES_AT="${ORCH_EXPIRES_AT:-}"
ORCH_CLOUD="${ORCH_CLOUD:-}"
ORCH_DRIVER_BRANCH="${ORCH_DRIVER_BRANCH:-570}"
ORCH_DNF_DRIVER_STREAM="${ORCH_DNF_DRIVER_STREAM:-latest-dkms}"
ORCH_INSTALL_CUDA="${ORCH_INSTALL_CUDA:-1}"

LOG="$ORCH_ROOT/var/log/orch-install-drivers.log"
STATE_DIR="$ORCH_ROOT/var/lib/orch"
READY="$STATE_DIR/ready"
FAILED="$STATE_DIR/failed"
UNIT_DIR="$ORCH_ROOT/etc/systemd/system"
OS_RELEASE="$ORCH_ROOT/etc/os-release"
NVIDIA_REPOS="https://developer.download.nvidia.com/compute/cuda/repos"

mkdir -p "${LOG%/*}" "$STATE_DIR"
exec >>"$LOG" 2>&1

log() { printf '%s orch-install-drivers: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*"; }

fail() {
    log "FAILED: $*"
    printf '%s\n' "$*" >"$FAILED"
    exit 1
}

# Any command that fails outside a test (`if`, `||`) ends the run with a failed marker.
trap 'fail "command failed (exit $?) at line $LINENO: $BASH_COMMAND"' ERR

run() { # a step that must succeed
    log "+ $*"
    "$@" || fail "'$*' failed (exit $?)"
}

try() { # a step whose failure is only logged
    log "+ $*"
    "$@" || log "'$*' failed (exit $?), carrying on"
}

# ------------------------------------------------------------------------------------ expiry

install_expiry() {
    if [[ -z "$ORCH_EXPIRES_AT" ]]; then
        log "no expiry set: the box lives until \`orch down\` or the sweeper removes it"
        return 0
    fi
    if [[ ! "$ORCH_EXPIRES_AT" =~ ^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$ ]]; then
        fail "ORCH_EXPIRES_AT '$ORCH_EXPIRES_AT' is not YYYY-MM-DDTHH:MM:SSZ"
    fi
    local calendar epoch
    calendar="${ORCH_EXPIRES_AT%Z}"
    calendar="${calendar/T/ } UTC"
    epoch="$(date -u -d "$ORCH_EXPIRES_AT" +%s)" || fail "cannot parse expiry $ORCH_EXPIRES_AT"
    mkdir -p "$UNIT_DIR"
    # The service re-checks the clock, so the boot-time trigger below only powers off a box
    # that was started again after its expiry.
    cat >"$UNIT_DIR/orch-expire.service" <<EOF
[Unit]
Description=orch: power this box off, it expired at $ORCH_EXPIRES_AT

[Service]
Type=oneshot
ExecStart=/bin/sh -c 'if [ "\$\$(date -u +%%s)" -ge $epoch ]; then exec systemctl poweroff; fi'
EOF
    cat >"$UNIT_DIR/orch-expire.timer" <<EOF
[Unit]
Description=orch: expiry of this box at $ORCH_EXPIRES_AT

[Timer]
OnCalendar=$calendar
OnBootSec=2min
Persistent=true
AccuracySec=30s

[Install]
WantedBy=timers.target
EOF
    run systemctl daemon-reload
    run systemctl enable --now orch-expire.timer
    log "expiry timer set for $calendar"
    if (($(date -u +%s) >= epoch)); then
        log "the box is already past its expiry: powering off"
        run systemctl poweroff
        exit 0
    fi
}

# ---------------------------------------------------------------------------- detection

read_os_release() { # prints "ID VERSION_ID"
    # shellcheck source=/dev/null
    (. "$OS_RELEASE" && printf '%s %s\n' "${ID:-unknown}" "${VERSION_ID:-unknown}")
}

# NVIDIA display (0300) and 3D (0302) controllers; NVSwitch bridges (0680) are not GPUs.
count_gpus() {
    if command -v lspci >/dev/null 2>&1; then
        lspci -nn -d 10de: | grep -cE '\[030[02]\]' || true
        return 0
    fi
    local count=0 dev
    for dev in "$ORCH_ROOT"/sys/bus/pci/devices/*; do
        [[ -r "$dev/vendor" && -r "$dev/class" ]] || continue
        [[ "$(cat "$dev/vendor")" == 0x10de && "$(cat "$dev/class")" == 0x030[02]* ]] || continue
        count=$((count + 1))
    done
    echo "$count"
}

has_nvswitch() {
    command -v lspci >/dev/null 2>&1 && lspci -nn -d 10de: | grep -qE '\[0680\]'
}

driver_works() {
    command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1
}

# ---------------------------------------------------------------------------- installers

install_ubuntu() {
    export DEBIAN_FRONTEND=noninteractive
    # cloud-init and unattended-upgrades hold the dpkg lock early in boot: wait for it.
    local apt=(apt-get -y -q -o DPkg::Lock::Timeout=900)
    local packages=("linux-headers-$(uname -r)" "nvidia-driver-${ORCH_DRIVER_BRANCH}-server")
    if has_nvswitch; then
        packages+=("nvidia-fabricmanager-${ORCH_DRIVER_BRANCH}")
    fi
    if [[ "$ORCH_INSTALL_CUDA" == 1 ]]; then
        # NVIDIA's CUDA repo only if the image already trusts it (its key is on the image);
        # otherwise Ubuntu's own packaging of the toolkit.
        if grep -rqs developer.download.nvidia.com "$ORCH_ROOT/etc/apt/sources.list.d/"; then
            packages+=(cuda-toolkit)
        else
            packages+=(nvidia-cuda-toolkit)
        fi
    fi
    run "${apt[@]}" update
    run "${apt[@]}" install --no-install-recommends "${packages[@]}"
}

install_dnf() { # $1: NVIDIA repo folder for this OS (amzn2023, rhel8)
    local repo="$1" arch
    arch="$(uname -m)"
    [[ "$arch" == aarch64 ]] && arch=sbsa
    run dnf -y install "kernel-devel-$(uname -r)" "kernel-headers-$(uname -r)" \
        "kernel-modules-extra-$(uname -r)" dkms
    run dnf config-manager --add-repo "$NVIDIA_REPOS/$repo/$arch/cuda-$repo.repo"
    run dnf clean expire-cache
    run dnf -y module install "nvidia-driver:$ORCH_DNF_DRIVER_STREAM"
    if has_nvswitch; then
        run dnf -y install nvidia-fabric-manager
    fi
    if [[ "$ORCH_INSTALL_CUDA" == 1 ]]; then
        run dnf -y install cuda-toolkit
    fi
}

# ---------------------------------------------------------------------------------- main

main() {
    if [[ -e "$READY" ]]; then
        log "already set up ($READY exists): nothing to do"
        exit 0
    fi
    rm -f "$FAILED"
    log "start (cloud: ${ORCH_CLOUD:-unknown}, expires: ${ORCH_EXPIRES_AT:-never})"
    install_expiry

    [[ -r "$OS_RELEASE" ]] || fail "cannot read $OS_RELEASE"
    local os_id os_version gpus
    read -r os_id os_version < <(read_os_release)
    gpus="$(count_gpus)"
    log "OS $os_id $os_version; $gpus NVIDIA GPU(s) on the PCI bus"
    [[ "$gpus" -gt 0 ]] || fail "no NVIDIA GPU on the PCI bus"

    if driver_works; then
        log "nvidia-smi works already (driver preinstalled): skipping the install"
    else
        case "$os_id $os_version" in
            "ubuntu 22.04" | "ubuntu 24.04") install_ubuntu ;;
            "amzn 2023") install_dnf amzn2023 ;;
            "alinux 3"*) install_dnf rhel8 ;;
            *) fail "unsupported OS '$os_id $os_version' (Ubuntu 22.04/24.04, AL2023, Alinux 3)" ;;
        esac
        try modprobe nvidia
        if has_nvswitch; then
            try systemctl enable --now nvidia-fabricmanager
        fi
        driver_works || fail "driver installed but nvidia-smi does not work (see $LOG)"
    fi

    local driver
    driver="$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1)"
    printf 'driver=%s\ngpus=%s\nos=%s %s\nat=%s\n' "$driver" "$gpus" "$os_id" "$os_version" \
        "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$READY.tmp"
    mv "$READY.tmp" "$READY"
    log "ready: driver $driver"
}

main "$@"
