# gridtrain's image for Kubernetes (k8s/mpijob.yaml, docs/kubernetes.md): Debian 12 with the CUDA
# 13.0 toolkit and NCCL from NVIDIA's repository, then the project's own scripts/install-deps
# and CMake presets, as on any machine; the GPU path is built because nvcc is found. Workers run
# sshd as mpiuser (uid 1000) on port 2222, which the MPI Operator's launcher reaches with the
# keys it mounts at /home/mpiuser/.ssh. Not built here (no container engine): see the docs.
#
#   docker build -t REGISTRY/gridtrain:0.1.0 . && docker push REGISTRY/gridtrain:0.1.0
FROM debian:12

RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates wget git openssh-server openssh-client \
 && wget -q https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb \
 && dpkg -i cuda-keyring_1.1-1_all.deb && rm cuda-keyring_1.1-1_all.deb \
 && apt-get update \
 && apt-get install -y --no-install-recommends cuda-toolkit-13-0 libnccl2 libnccl-dev \
 && rm -rf /var/lib/apt/lists/*
ENV PATH=/usr/local/cuda/bin:${PATH}

COPY . /opt/gridtrain
WORKDIR /opt/gridtrain
RUN scripts/install-deps \
 && cmake --preset default \
 && cmake --build --preset default --target gridtrain \
 && rm -rf /var/lib/apt/lists/*

# sshd for a non-root user: its own config, host key and pid file; the client side reaches the
# workers on 2222 without host-key prompts (pods come and go).
RUN useradd -m -u 1000 mpiuser \
 && printf 'Port 2222\nHostKey /home/mpiuser/.ssh_host_ed25519_key\nPidFile /home/mpiuser/sshd.pid\nStrictModes no\n' \
      > /home/mpiuser/.sshd_config \
 && ssh-keygen -q -t ed25519 -N '' -f /home/mpiuser/.ssh_host_ed25519_key \
 && chown mpiuser:mpiuser /home/mpiuser/.sshd_config /home/mpiuser/.ssh_host_ed25519_key* \
 && printf 'Host *\n  Port 2222\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n' >> /etc/ssh/ssh_config
USER mpiuser
WORKDIR /home/mpiuser
