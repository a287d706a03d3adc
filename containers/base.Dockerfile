# sparring-base:bookworm: Debian bookworm + python3 + git + a venv at /opt/venv with pytest.
# Built by `sparring build base` on top of ROOTFS (Debian bookworm with python3, python3-venv, git),
# which comes from `docker pull` + rootfs-pull.Dockerfile where a registry answers, else from
# debootstrap + `docker import`. The build context holds `wheels/` (downloaded on the host): pip
# installs with --no-index, so the build needs no network.
ARG ROOTFS=sparring-rootfs:bookworm
FROM ${ROOTFS}
ENV LANG=C.UTF-8 \
    PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_INDEX=1
COPY wheels/ /tmp/wheels/
RUN python3 -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-index --find-links /tmp/wheels --no-cache-dir -r /tmp/wheels/requirements.txt \
 && rm -rf /tmp/wheels /root/.cache
RUN useradd --create-home --home-dir /home/sparring --uid 1000 --user-group --shell /bin/bash sparring \
 && mkdir -p /repo && chown sparring:sparring /repo
WORKDIR /repo
CMD ["/bin/bash"]
