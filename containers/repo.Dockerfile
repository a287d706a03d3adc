# sparring-repo/<name>:<version>: one catalog repository on the base image.
# Built by `sparring build repos` from a context folder holding `repo/` (the git history built
# from the project's PyPI releases, working tree at the newest) and `wheels/` (the project's
# dependencies, downloaded on the host, with a requirements.txt). The build runs with no network:
# pip installs with --no-index from the wheelhouse.
ARG BASE_IMAGE=sparring-base:bookworm
FROM ${BASE_IMAGE}
ARG SOURCE_DIR=.
USER root
COPY wheels/ /tmp/wheels/
RUN if [ -s /tmp/wheels/requirements.txt ]; then \
      pip install --no-index --no-cache-dir --find-links /tmp/wheels -r /tmp/wheels/requirements.txt; \
    fi \
 && rm -rf /tmp/wheels /root/.cache \
 && git config --system --add safe.directory '*' \
 && git config --system user.name sparring \
 && git config --system user.email sparring@sparring.invalid
COPY --chown=sparring:sparring repo/ /repo/
# The working tree's code is what runs: the package is not installed, its folder is on the path.
# A fixed hash seed keeps test ids stable: some suites build parameter ids from sets.
ENV PYTHONPATH=/repo/${SOURCE_DIR} \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONHASHSEED=0
WORKDIR /repo
