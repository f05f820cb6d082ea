#!/usr/bin/env bash
# Pretend hosts on one machine for multi-host MPI tests: N network namespaces ("hosts"), each with
# one veth interface plugged into a bridge that lives in its own switch namespace, addressed in a
# private /24 that exists only inside these namespaces (the root namespace gets no address, no
# route and no interface of it, so test traffic cannot leave). Each host has its own /etc/hosts
# (ip-netns bind-mounts /etc/netns/<host>/hosts) naming every host, and `exec` gives the command
# its own UTS namespace whose hostname is the host's name.
#
#   scripts/netns_hosts.sh create              # hosts trnode1, trnode2 (+ switch trnode-sw)
#   scripts/netns_hosts.sh hostfile [SLOTS]    # an Open MPI hostfile naming them
#   scripts/netns_hosts.sh exec HOST CMD...    # run CMD "on" HOST
#   scripts/netns_hosts.sh rsh HOST WORDS...   # ssh-like: joins WORDS into one sh -c command line
#                                              # (Open MPI: --mca plm_rsh_agent "$0 rsh")
#   scripts/netns_hosts.sh destroy             # deletes every namespace and file create made
#
# Environment: TRAINER_NETNS_PREFIX (default trnode), TRAINER_NETNS_COUNT (default 2),
# TRAINER_NETNS_SUBNET (first three octets, default 10.213.57; host i gets .(10+i)),
# TRAINER_NETNS_PRIVATE_DIRS ("HOST:DIR[,HOST:DIR...]": `exec` and `rsh` on HOST first mount an
# empty tmpfs over the existing folder DIR, inside the command's own mount namespace, so that HOST
# sees a folder of its own where the others share one: an unshared checkpoint folder, a data file
# missing on one host).
set -euo pipefail

prefix=${TRAINER_NETNS_PREFIX:-trnode}
count=${TRAINER_NETNS_COUNT:-2}
subnet=${TRAINER_NETNS_SUBNET:-10.213.57}
switch=$prefix-sw

die() {
  echo "error: $*" >&2
  exit 1
}
usage() {
  echo "usage: $0 create|destroy|hostfile [SLOTS]|exec HOST CMD...|rsh HOST WORDS..." >&2
  exit 2
}

host_name() { echo "$prefix$1"; }
host_address() { echo "$subnet.$((10 + $1))"; }
namespace_exists() { ip netns list | awk '{print $1}' | grep -qx "$1"; }

create() {
  [[ $(id -u) -eq 0 ]] || die "creating network namespaces ($prefix*): not root. Run it as root."
  command -v ip >/dev/null || die "creating network namespaces: ip not found. Install iproute2."
  namespace_exists "$switch" &&
    die "creating network namespaces ($switch): it exists already. Run '$0 destroy' first."
  local i name hosts_file
  ip netns add "$switch"
  ip -n "$switch" link add br0 type bridge
  ip -n "$switch" link set br0 up
  ip -n "$switch" link set lo up
  hosts_file=$(mktemp)
  printf '127.0.0.1 localhost\n' >"$hosts_file"
  for i in $(seq 1 "$count"); do
    printf '%s %s\n' "$(host_address "$i")" "$(host_name "$i")" >>"$hosts_file"
  done
  for i in $(seq 1 "$count"); do
    name=$(host_name "$i")
    ip netns add "$name"
    # The pair is created directly inside the two namespaces: it never exists in the root one.
    ip link add eth0 netns "$name" type veth peer name "port$i" netns "$switch"
    ip -n "$switch" link set "port$i" master br0 up
    ip -n "$name" addr add "$(host_address "$i")/24" dev eth0
    ip -n "$name" link set eth0 up
    ip -n "$name" link set lo up
    mkdir -p "/etc/netns/$name"
    cp "$hosts_file" "/etc/netns/$name/hosts"
  done
  rm -f "$hosts_file"
  # Every host must answer from the first one: a TCP connect to a closed port is refused (RST)
  # when the peer is reachable, and times out when it is not. No ping needed.
  for i in $(seq 2 "$count"); do
    local tries=0
    until [[ $(ip netns exec "$(host_name 1)" timeout 1 bash -c \
      "echo >/dev/tcp/$(host_address "$i")/1" 2>&1) == *"Connection refused"* ]]; do
      tries=$((tries + 1))
      [[ $tries -lt 10 ]] || die "creating network namespaces: $(host_name "$i") is not reachable from $(host_name 1). Check 'ip -n $switch link' and run '$0 destroy'."
    done
  done
  echo "created hosts: $(for i in $(seq 1 "$count"); do printf '%s=%s ' "$(host_name "$i")" "$(host_address "$i")"; done)(subnet $subnet.0/24, switch $switch)"
}

destroy() {
  local i name
  for i in $(seq 1 "$count"); do
    name=$(host_name "$i")
    if namespace_exists "$name"; then
      # Processes still inside would keep the namespace alive: end them first.
      ip netns pids "$name" 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
      ip netns del "$name"
    fi
    rm -rf "/etc/netns/$name"
  done
  if namespace_exists "$switch"; then ip netns del "$switch"; fi
  echo "destroyed hosts ${prefix}1..${prefix}${count} and switch $switch"
}

hostfile() {
  local slots=${1:-1} i
  for i in $(seq 1 "$count"); do echo "$(host_name "$i") slots=$slots"; done
}

# exec HOST CMD...: the command runs in HOST's network namespace (with HOST's /etc/hosts) and in a
# new UTS namespace whose hostname is HOST.
exec_on() {
  [[ $# -ge 2 ]] || usage
  local host=$1
  shift
  namespace_exists "$host" || die "running on $host: no such network namespace. Run '$0 create' first."
  # ip netns exec runs the command in a mount namespace of its own (a slave of the root one), so
  # a tmpfs mounted there is seen by this command and its children only.
  local entry dir mounts=""
  local private=${TRAINER_NETNS_PRIVATE_DIRS:-}
  for entry in ${private//,/ }; do
    [[ ${entry%%:*} == "$host" ]] || continue
    dir=${entry#*:}
    [[ -d $dir && $dir != *"'"* ]] ||
      die "private folder $dir for $host (TRAINER_NETNS_PRIVATE_DIRS): not an existing folder without quotes or spaces. Create it first."
    mounts+="mount -t tmpfs -o size=64m trainer-private '$dir' && "
  done
  # shellcheck disable=SC2016  # $0 and $@ belong to the inner sh
  exec ip netns exec "$host" unshare --uts sh -c "${mounts}"'hostname "$0" && exec "$@"' "$host" "$@"
}

# rsh HOST WORDS...: what ssh does with a remote command: the words joined by spaces, run by sh.
rsh() {
  [[ $# -ge 2 ]] || usage
  local host=$1
  shift
  exec_on "$host" sh -c "$*"
}

[[ $# -ge 1 ]] || usage
action=$1
shift
case $action in
  create) create ;;
  destroy) destroy ;;
  hostfile) hostfile "$@" ;;
  exec) exec_on "$@" ;;
  rsh) rsh "$@" ;;
  *) usage ;;
esac
