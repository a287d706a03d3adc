# sparring-rootfs:bookworm from a pulled Debian image (used where a registry answers). PACKAGES is
# the same list the debootstrap path includes (base_image.ROOTFS_PACKAGES).
ARG DEBIAN=debian:bookworm-slim
FROM ${DEBIAN}
ARG PACKAGES
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${PACKAGES} \
 && rm -rf /var/lib/apt/lists/*
