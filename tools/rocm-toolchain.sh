#!/usr/bin/env bash
# rocm-toolchain.sh - mlx-amd's way to get a ROCm 6.4 compiler: Debian sid's own
# ROCm/HIP packages (hipcc 7.0.2, clang-21, HIP 6.4 headers, hipBLASLt,
# hipCUB/rocPRIM, hipFFT, hipRTC, CMake, python3) in a debootstrap chroot cached
# outside the repository. Used by build_kernels.py for the AMD code objects and by
# the HIP binding check, on hosts without ROCm or with an older glibc (Debian 12).
#
# Usage (as root):
#   rocm-toolchain.sh [setup] [ROOT]            create/complete the chroot (idempotent;
#                                               a ready chroot costs one dpkg query)
#   rocm-toolchain.sh run   <hostdir> <cmd...>  run cmd in the chroot, cwd = hostdir
#   rocm-toolchain.sh shell <hostdir>           interactive bash, same mounts
#   rocm-toolchain.sh status [ROOT]             show what is installed
#
# ROOT defaults to $ROCM_CHROOT or /var/cache/rocm-sid-root. `run` and `shell`
# call setup first and bind-mount <hostdir> at the same absolute path inside the
# chroot (override with ROCM_MOUNT_AT=/path). To refresh the packages, delete ROOT
# and run setup again (about a minute); build_kernels.py notices the new compiler.
#
# Environment knobs:
#   ROCM_CHROOT      chroot path (default /var/cache/rocm-sid-root)
#   ROCM_SUITE       Debian suite to bootstrap (default sid)
#   ROCM_MIRROR      Debian mirror (default: the first Debian archive this host's apt uses)
#   ROCM_EXTRA_PKGS  extra packages, e.g. "librocblas-dev libhipsolver-dev"
#   ROCM_PASS_ENV    space-separated host variables to pass into `run`
#
# The chroot only compiles and links: docs, man pages and hipBLASLt/rocBLAS's GPU
# kernel data files (needed only to run on a GPU) are not installed (~0.7 GB saved).
#
# Mounts: commands run in a private mount + PID namespace (unshare), so their
# mounts and processes vanish with them even if the script is killed (kill -9
# included); a trap also unmounts explicitly, the only cleanup when unshare is
# unavailable or ROCM_NO_UNSHARE=1.
#
# Inside `run`: CC=clang-21 CXX=clang++-21 (override: ROCM_CC/ROCM_CXX); the
# chroot has no gcc. Notes for Debian's layout: do not set ROCM_PATH/HIP_PATH
# (=/usr breaks clang's device-library lookup); CMake's HIP language needs no
# hints but always pass -DCMAKE_HIP_ARCHITECTURES (no GPU -> silently gfx906);
# with plain clang++ repeat --offload-arch=X per arch (a comma list keeps only
# the first arch); hipcc splits comma lists itself.
#
# Example:
#   rocm-toolchain.sh run "$PWD" hipcc --offload-arch=gfx90a,gfx942 k.hip -o k -lhipblaslt
set -Eeuo pipefail

DEFAULT_ROOT=/var/cache/rocm-sid-root
SELF=$(realpath "${BASH_SOURCE[0]}")
SUITE=${ROCM_SUITE:-sid}
host_mirror() {  # the Debian archive URI this host's apt is configured with (not the security one)
  { cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '/^URIs:/ {print $2}'
    cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | awk '/^deb / {print $2}'
  } | awk '/\/debian\/?$/ && !/security/ {print; exit}' || true
}
MIRROR=${ROCM_MIRROR:-$(host_mirror)}
BASE_PKGS=(
  hipcc                  # hipcc/hipconfig; pulls clang-21, lld-21, rocm-device-libs-21
  libamdhip64-dev        # HIP runtime API headers + libamdhip64, hipRTC (libhiprtc6)
  libhipblaslt-dev
  libhipblas-common-dev  # needed by hipblaslt.h but not declared by libhipblaslt-dev 7.1.1+dfsg-4
  libhipcub-dev
  librocprim-dev
  libhipfft-dev
  librocblas-dev         # rocBLAS (the GEMM fallback where hipBLASLt lacks a type or arch):
                         # its rows are bound and checked too; its per-arch kernel files are
                         # not installed (path-exclude below)
  libhipsolver-dev       # hipSOLVER (linalg: Cholesky, LU, inverse); pulls rocSOLVER
  cmake ninja-build make
  python3                # build_kernels.py's job runner and the HIP binding check
)
# ROCM_PACKAGES replaces the list (e.g. a trixie chroot with ROCm 5.7's HIP only, for the
# binding check: trixie has no hipBLASLt)
if [[ -n ${ROCM_PACKAGES:-} ]]; then read -r -a BASE_PKGS <<<"$ROCM_PACKAGES"; fi
STAMP_BOOTSTRAP=.rocm-toolchain-bootstrap
STAMP_PKGS=.rocm-toolchain-pkgs

log() { printf '[rocm-toolchain] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

need_root() { [[ $(id -u) -eq 0 ]] || die "must run as root"; }

pkg_list() {
  local extra=()
  read -r -a extra <<<"${ROCM_EXTRA_PKGS:-}"
  printf '%s\n' "${BASE_PKGS[@]}" "${extra[@]}" | sed '/^$/d' | sort -u
}

ensure_host_tools() {
  local missing=()
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  command -v unshare >/dev/null || missing+=(util-linux)
  command -v flock >/dev/null || missing+=(util-linux)
  if ((${#missing[@]})); then
    log "installing host tools: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

# Mounts needed by apt/dpkg while (re)configuring the chroot. Kept minimal.
chroot_apt() {
  local root=$1; shift
  chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    DEBIAN_FRONTEND=noninteractive "$@"
}

configure_chroot() {
  local root=$1
  # The mirror may be a frozen snapshot whose Release file is past Valid-Until.
  printf 'Acquire::Check-Valid-Until "false";\nAPT::Install-Recommends "false";\nAcquire::Retries "3";\n' \
    >"$root/etc/apt/apt.conf.d/90rocm-toolchain"
  cat >"$root/etc/dpkg/dpkg.cfg.d/90rocm-toolchain-slim" <<'EOF'
# Compile/link-only toolchain: drop docs and GPU kernel data that only matter at run time.
path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/locale/*
path-exclude=/usr/lib/x86_64-linux-gnu/hipblaslt/library/*
path-exclude=/usr/lib/x86_64-linux-gnu/rocblas/*/library/*
EOF
  # Never start services inside the chroot.
  printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
  chmod 755 "$root/usr/sbin/policy-rc.d"
  cp -L /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
}

do_bootstrap() {
  local root=$1
  [[ -f $root/$STAMP_BOOTSTRAP ]] && return 0
  [[ -e $root && -n $(ls -A "$root" 2>/dev/null) ]] &&
    die "$root exists, is not empty and was not made by this script; remove it or pick another path"
  local tmp="$root.partial"
  # A previous interrupted run may have left mounts or files behind.
  umount -R -l "$tmp" 2>/dev/null || true
  rm -rf --one-file-system "$tmp"
  mkdir -p "$(dirname "$root")"
  [[ -n "$MIRROR" ]] || die "no Debian archive found in this host's apt sources; set ROCM_MIRROR"
  log "debootstrap --variant=minbase $SUITE -> $root (mirror $MIRROR)"
  local t0=$SECONDS
  debootstrap --variant=minbase "$SUITE" "$tmp" "$MIRROR" >"$tmp.log" 2>&1 ||
    { tail -20 "$tmp.log" >&2; die "debootstrap failed (log: $tmp.log)"; }
  date -u +%FT%TZ >"$tmp/$STAMP_BOOTSTRAP"
  rmdir "$root" 2>/dev/null || true
  mv "$tmp" "$root"
  rm -f "$tmp.log"
  log "debootstrap done in $((SECONDS - t0))s"
}

pkgs_installed() {
  local root=$1; shift
  local st
  st=$(chroot_apt "$root" dpkg-query -W -f='${db:Status-Status}\n' "$@" 2>/dev/null) || return 1
  [[ $(grep -c '^installed$' <<<"$st") -eq $# ]]
}

do_install() {
  local root=$1
  is_ready "$root" && return 0
  local pkgs all
  mapfile -t pkgs < <(pkg_list)
  configure_chroot "$root"
  local t0=$SECONDS
  log "apt-get install ${pkgs[*]}"
  local aptlog="$root.apt.log"
  if ! { ns_exec wait "$root" "" apt-get update -q &&
         ns_exec wait "$root" "" apt-get install -y -q --no-install-recommends "${pkgs[@]}"; } >"$aptlog" 2>&1; then
    tail -25 "$aptlog" >&2
    die "apt-get failed (log: $aptlog)"
  fi
  grep -E '^(Need to get|After this operation)' "$aptlog" >&2 || true
  pkgs_installed "$root" "${pkgs[@]}" || die "package installation failed (log: $aptlog)"
  rm -f "$aptlog"
  chroot_apt "$root" apt-get clean
  # Same stamp format as the team's earlier helper, so chroots it made are accepted.
  printf 'slim=1 %s\n' "${pkgs[*]}" >"$root/$STAMP_PKGS"
  log "packages installed in $((SECONDS - t0))s"
}

# with_mounts ROOT HOSTDIR CMD... : run CMD (a host command, usually chroot ...)
# with /proc, /sys, /dev and optionally HOSTDIR mounted into ROOT; unmount after.
MOUNTED=()
unmount_all() {
  local i
  for ((i = ${#MOUNTED[@]} - 1; i >= 0; i--)); do
    umount -R "${MOUNTED[i]}" 2>/dev/null || umount -R -l "${MOUNTED[i]}" 2>/dev/null || true
  done
  MOUNTED=()
}
mount_into() { # mount_into TARGET mount-args...
  local target=$1; shift
  if mountpoint -q "$target"; then return 0; fi
  mount "$@" "$target" && MOUNTED+=("$target")
}
with_mounts() {
  local root=$1 hostdir=$2; shift 2
  trap 'unmount_all' EXIT
  trap 'unmount_all; exit 130' INT TERM HUP
  mount_into "$root/proc" -t proc proc
  mount_into "$root/sys" -t sysfs sysfs -o ro || log "warning: could not mount /sys"
  mount_into "$root/dev" --rbind /dev
  if [[ -n $hostdir ]]; then
    local at=${ROCM_MOUNT_AT:-$hostdir}
    mkdir -p "$root$at"
    mount_into "$root$at" --bind "$hostdir"
  fi
  local rc=0
  "$@" || rc=$?
  unmount_all
  trap - EXIT INT TERM HUP
  return "$rc"
}

check_hostdir() {
  local d=$1 root=$2
  [[ -d $d ]] || die "not a directory: $d"
  d=$(realpath "$d")
  local at=${ROCM_MOUNT_AT:-$d}
  [[ $at == /* ]] || die "ROCM_MOUNT_AT must be absolute"
  case "$at/" in
    / | /usr/* | /etc/* | /proc/* | /sys/* | /dev/* | /bin/* | /sbin/* | /lib/* | /lib32/* | \
    /lib64/* | /libx32/* | /boot/* | /run/* | /var/lib/* | /var/cache/apt/*)
      die "refusing to mount over chroot system path $at (set ROCM_MOUNT_AT, e.g. /src)" ;;
  esac
  case "$d/" in "$root"/*) die "host dir is inside the chroot" ;; esac
  printf '%s' "$d"
}

run_env() {
  local vars=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
    HOME=/root LANG=C.UTF-8 TERM="${TERM:-dumb}"
    CC="${ROCM_CC:-clang-21}" CXX="${ROCM_CXX:-clang++-21}"
    DEBIAN_FRONTEND=noninteractive)
  local v
  for v in ${ROCM_PASS_ENV:-}; do
    [[ -v $v ]] && vars+=("$v=${!v}")
  done
  printf '%s\0' "${vars[@]}"
}

# ns_exec MODE ROOT HOSTDIR CMD... : run CMD inside the chroot with /proc, /sys,
# /dev (and HOSTDIR, if not empty) mounted, cwd = HOSTDIR's mount point (or /).
# With unshare, CMD lives in a private mount + PID namespace, so neither its
# mounts nor its processes can outlive it.
#   wait      run, return CMD's status
#   supervise as wait, and a TERM/INT/HUP sent to this script kills CMD's whole
#             process tree at once (unshare dies -> the kernel SIGKILLs PID 1 of
#             the namespace -> every process in it dies, its mounts go away)
#   exec      replace this script (interactive shell: normal Ctrl-C handling)
ns_exec() {
  local mode=$1; shift
  # setpriv --pdeathsig: unshare also dies if this script is SIGKILLed.
  local ns=(setpriv --pdeathsig KILL unshare --mount --propagation private --pid --fork --kill-child)
  if [[ -n ${ROCM_NO_UNSHARE:-} ]] || ! "${ns[@]}" true 2>/dev/null; then
    inner_exec "$@"
    return
  fi
  ns+=(-- bash "$SELF" __inner)
  case $mode in
    exec) exec "${ns[@]:3}" "$@" ;;
    wait) "${ns[@]}" "$@" ;;
    supervise)
      "${ns[@]}" "$@" <&0 &
      local pid=$! rc=0 sig=0
      trap 'sig=143; kill -KILL "$pid" 2>/dev/null || true' TERM
      trap 'sig=130; kill -KILL "$pid" 2>/dev/null || true' INT
      trap 'sig=129; kill -KILL "$pid" 2>/dev/null || true' HUP
      while :; do
        rc=0; wait "$pid" || rc=$?
        kill -0 "$pid" 2>/dev/null || break
      done
      trap - TERM INT HUP
      ((sig)) && rc=$sig
      return "$rc" ;;
  esac
}
inner_exec() {
  local root=$1 hostdir=$2; shift 2
  local at=/
  [[ -n $hostdir ]] && at=${ROCM_MOUNT_AT:-$hostdir}
  local envv
  mapfile -d '' -t envv < <(run_env)
  with_mounts "$root" "$hostdir" chroot "$root" env -i "${envv[@]}" \
    /bin/sh -c 'cd "$1" && shift && exec "$@"' sh "$at" "$@"
}

# Ready = bootstrapped and every requested package installed.
is_ready() {
  local root=$1 pkgs
  [[ -f $root/$STAMP_BOOTSTRAP && -f $root/$STAMP_PKGS ]] || return 1
  mapfile -t pkgs < <(pkg_list)
  pkgs_installed "$root" "${pkgs[@]}"
}

# setup ROOT: make sure the chroot is complete. Concurrent `run`s share a lock;
# work on the chroot (bootstrap/install) takes it exclusively.
setup() {
  local root=$1
  need_root
  mkdir -p "$(dirname "$root")"
  exec 9>"$root.lock"
  flock -s 9
  is_ready "$root" && return 0
  flock -x 9
  ensure_host_tools
  do_bootstrap "$root"
  do_install "$root"
  flock -s 9
}

main() {
  local cmd=${1:-setup}
  local root=${ROCM_CHROOT:-$DEFAULT_ROOT}
  case "$cmd" in
    setup)
      [[ $# -ge 2 ]] && root=$2
      root=$(realpath -m "$root")
      setup "$root"
      log "ready: $root ($(chroot "$root" dpkg-query -W -f='hipcc ${Version}, clang ' hipcc)$(chroot "$root" dpkg-query -W -f='${Version}' clang-21))" ;;
    run | shell)
      [[ $# -ge 2 ]] || die "usage: $0 run <hostdir> <command...> | $0 shell <hostdir>"
      root=$(realpath -m "$root")
      local hostdir
      hostdir=$(check_hostdir "$2" "$root")
      shift 2
      if [[ $cmd == shell ]]; then set -- bash -l; fi
      [[ $# -ge 1 ]] || die "no command given"
      setup "$root"
      if [[ $cmd == shell ]]; then ns_exec exec "$root" "$hostdir" "$@"; fi
      ns_exec supervise "$root" "$hostdir" "$@" ;;
    __inner)
      shift
      inner_exec "$@" ;;
    status)
      [[ $# -ge 2 ]] && root=$2
      root=$(realpath -m "$root")
      [[ -f $root/$STAMP_BOOTSTRAP ]] || { echo "no chroot at $root"; exit 1; }
      echo "chroot: $root (bootstrapped $(cat "$root/$STAMP_BOOTSTRAP"), $(du -sxh "$root" | cut -f1))"
      echo "packages: $(cat "$root/$STAMP_PKGS" 2>/dev/null || echo '(not installed)')"
      chroot "$root" dpkg-query -W -f='  ${Package} ${Version}\n' hipcc clang-21 libamdhip64-dev \
        libhipblaslt-dev libhipcub-dev librocprim-dev libhipfft-dev cmake 2>/dev/null || true ;;
    -h | --help | help)
      sed -n '2,/^set -Eeuo/p' "$0" | sed '$d; s/^# \{0,1\}//' ;;
    *)
      # `rocm-toolchain.sh /some/path` == setup /some/path
      if [[ $cmd == /* || $cmd == ./* ]]; then main setup "$cmd"; else die "unknown command $cmd (try --help)"; fi ;;
  esac
}

main "$@"
