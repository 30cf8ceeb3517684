#!/bin/sh
#
# Managed by gpucluster (Ansible): local edits are overwritten on the next converge.
#
# RoCE QoS for ens1f0np0, from the cluster spec.
# Lossless (PFC) priority: 3
# DSCP trust: on
# ECN: on
# RDMA CM traffic class: 106
set -eu
dev=ens1f0np0
ip link set dev "$dev" mtu 9000
dcb apptrust set dev "$dev" order dscp
dcb pfc set dev "$dev" prio-pfc 0:off 1:off 2:off 3:on 4:off 5:off 6:off 7:off
for path in /sys/class/net/"$dev"/ecn/roce_np/enable /sys/class/net/"$dev"/ecn/roce_rp/enable; do
  [ -d "$path" ] && echo 1 > "$path/3"
done
for ibdev in /sys/class/net/"$dev"/device/infiniband/*; do
  [ -e "$ibdev" ] || continue
  name=$(basename "$ibdev")
  mkdir -p /sys/kernel/config/rdma_cm/"$name"
  echo 106 > /sys/kernel/config/rdma_cm/"$name"/ports/1/default_roce_tos
  rmdir /sys/kernel/config/rdma_cm/"$name"
done
