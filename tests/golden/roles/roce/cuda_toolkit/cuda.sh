#
# Managed by gpucluster (Ansible): local edits are overwritten on the next converge.
#
# CUDA 13.0.1 for login shells.
export CUDA_HOME=/usr/local/cuda-13.0
case ":${PATH}:" in
  *":${CUDA_HOME}/bin:"*) ;;
  *) export PATH="${CUDA_HOME}/bin${PATH:+:${PATH}}" ;;
esac
case ":${LD_LIBRARY_PATH:-}:" in
  *":${CUDA_HOME}/lib64:"*) ;;
  *) export LD_LIBRARY_PATH="${CUDA_HOME}/lib64${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}" ;;
esac
