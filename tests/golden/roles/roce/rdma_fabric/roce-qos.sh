#!/bin/sh
#
# Managed by gpucluster (Ansible): local edits are overwritten on the next converge.
#
# RoCE QoS on every RoCE rail, from the cluster spec.
# Lossless (PFC) priority: 3
# DSCP trust: on
# ECN: on
# RDMA CM traffic class: 106 (DSCP 26)
#
# Trust and the DSCP-to-priority map: mlx5 implements no `dcb apptrust` (and iproute2 before 6.2,
# Debian 12's and Ubuntu 22.04's, has no such command). It trusts DSCP once the APP table holds a
# DSCP entry, the way NVIDIA's mlnx_qos sets it: `dcb app ... dscp-prio DSCP:PRIO`
# (dcb-app(8), https://man7.org/linux/man-pages/man8/dcb-app.8.html; iproute2 5.15 in Ubuntu 22.04:
# https://manpages.ubuntu.com/manpages/jammy/man8/dcb-app.8.html). Where DOCA-OFED installed
# mlnx_qos, it sets trust and PFC in one call (`mlnx_qos -i DEV --trust dscp --pfc ...`).
set -eu
# The netdev of each RDMA device on the platform's compute RoCE rails (dgx-h100-roce):
# storage ports keep their own QoS. A device the node lacks stops the script, naming it.
rails=""
for ibdev in mlx5_0 mlx5_3 mlx5_4 mlx5_5 mlx5_6 mlx5_9 mlx5_10 mlx5_11; do
  found=""
  for net in /sys/class/infiniband/"$ibdev"/device/net/*; do
    if [ -e "$net" ]; then found="$found $(basename "$net")"; fi
  done
  if [ -z "$found" ]; then
    echo "gpucluster-roce-qos: RDMA device $ibdev of the platform's compute RoCE rails has no netdev" >&2
    exit 1
  fi
  rails="$rails$found"
done
if [ -z "$rails" ]; then
  echo "gpucluster-roce-qos: no compute RoCE rail on this node's platform" >&2
  exit 1
fi
for dev in $rails; do
  ip link set dev "$dev" mtu 9000
  if command -v mlnx_qos >/dev/null 2>&1; then
    mlnx_qos -i "$dev" --trust dscp --pfc 0,0,0,1,0,0,0,0 >/dev/null
  fi
  # Always through dcb as well: the APP table and PFC map it writes are what GC-NET-005 reads
  # back (`dcb -j app show`, `dcb -j pfc show`), whichever tool set the trust state.
  dcb app replace dev "$dev" dscp-prio 0:0 1:0 2:0 3:0 4:0 5:0 6:0 7:0 8:1 9:1 10:1 11:1 12:1 13:1 14:1 15:1 16:2 17:2 18:2 19:2 20:2 21:2 22:2 23:2 24:3 25:3 26:3 27:3 28:3 29:3 30:3 31:3 32:4 33:4 34:4 35:4 36:4 37:4 38:4 39:4 40:5 41:5 42:5 43:5 44:5 45:5 46:5 47:5 48:6 49:6 50:6 51:6 52:6 53:6 54:6 55:6 56:7 57:7 58:7 59:7 60:7 61:7 62:7 63:7
  dcb pfc set dev "$dev" prio-pfc 0:off 1:off 2:off 3:on 4:off 5:off 6:off 7:off
  for path in /sys/class/net/"$dev"/ecn/roce_np/enable /sys/class/net/"$dev"/ecn/roce_rp/enable; do
    if [ -d "$path" ]; then
      echo 1 > "$path/3"
    fi
  done
  for ibdev in /sys/class/net/"$dev"/device/infiniband/*; do
    [ -e "$ibdev" ] || continue
    name=$(basename "$ibdev")
    mkdir -p /sys/kernel/config/rdma_cm/"$name"
    echo 106 > /sys/kernel/config/rdma_cm/"$name"/ports/1/default_roce_tos
    rmdir /sys/kernel/config/rdma_cm/"$name"
  done
done
