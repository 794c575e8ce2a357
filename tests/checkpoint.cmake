# Checkpoint interoperability with PyTorch: a small C++ tool, and Python tests that drive it.
# The Python tests need Debian's torch and PyPI's safetensors, set up by scripts/setup-python.sh in .venv-py.
# Whether that environment works is decided when the test runs, not here, so running the script after
# configuring is enough; without it the tests report skipped (exit 77), never passed.

add_executable(checkpoint_tool checkpoint_tool.cpp)
target_link_libraries(checkpoint_tool PRIVATE mnistdp_host nlohmann_json::nlohmann_json mnistdp_warnings)

set(MNISTDP_PYTHON "${PROJECT_SOURCE_DIR}/.venv-py/bin/python" CACHE FILEPATH
    "Python with torch and safetensors for the interoperability tests (scripts/setup-python.sh makes it)")

# Runs a script under tests/python with MNISTDP_PYTHON, or exits 77 with a note when that Python cannot
# import torch and safetensors.
function(mnistdp_add_python_test name script)
  add_test(NAME ${name}
    COMMAND sh -c "if \"$0\" -c 'import torch, safetensors.torch' 2>/dev/null; then exec \"$0\" \"$@\"; \
else echo 'skipped: no Python with torch and safetensors at '\"$0\"'; run scripts/setup-python.sh'; exit 77; fi"
      ${MNISTDP_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/${script} ${ARGN})
  set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77 LABELS python TIMEOUT 300)
endfunction()

mnistdp_add_python_test(python_checkpoint_interop test_checkpoint_torch.py
  --tool $<TARGET_FILE:checkpoint_tool>)

# One PyTorch step against mnist-dp's next one, across an epoch boundary; and a checkpoint's accuracy in PyTorch.
mnistdp_add_python_test(python_step_vs_torch test_step_vs_torch.py --mnist-dp $<TARGET_FILE:mnist-dp>
  --tool $<TARGET_FILE:checkpoint_tool> --data ${MNISTDP_TEST_DATA} --device cpu --steps 937)
# The same with GELU, on the CPU path: nn.GELU()'s forward and its autograd against mnist-dp's kernels. Three
# steps, within an epoch: the activation is what differs.
mnistdp_add_python_test(python_step_vs_torch_gelu test_step_vs_torch.py --mnist-dp $<TARGET_FILE:mnist-dp>
  --tool $<TARGET_FILE:checkpoint_tool> --data ${MNISTDP_TEST_DATA} --device cpu --steps 3 --activation gelu)
mnistdp_add_python_test(python_accuracy_vs_torch test_accuracy_torch.py --mnist-dp $<TARGET_FILE:mnist-dp>
  --data ${MNISTDP_TEST_DATA} --train-epochs 1
  --checkpoint ${CMAKE_CURRENT_BINARY_DIR}/accuracy_vs_torch.safetensors)
