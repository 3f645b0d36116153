/* A shared object with no device code at all (like deep_gemm_cpp, which compiles its kernels at run time). */
int sglstack_fixture_host_only(void) { return 42; }
