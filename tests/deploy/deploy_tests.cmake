# Offline checks of deploy/ (Dockerfile, entry point, compose, Prometheus,
# Grafana, Kubernetes). Needs the Debian packages python3-yaml, yamllint,
# docker-compose and prometheus (for promtool); nothing runs a container.
# scripts/container_check.sh builds and runs the image itself (too slow for
# CI; see docs/deploy.md).
add_test(NAME deploy_manifests_test
  COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/deploy/deploy_manifests_test.py
    --source_dir ${PROJECT_SOURCE_DIR}
    --server $<TARGET_FILE:convserve-server>)
set_tests_properties(deploy_manifests_test PROPERTIES LABELS deploy TIMEOUT 120)
