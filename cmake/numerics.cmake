# The floating-point flags of every target that compiles octopt's numerics (the OCTOPT_HD headers of
# cpp/include/octopt/numerics/): no contraction of a * b + c into one fused multiply-add, because GCC
# contracts by default (-ffp-contract=fast) wherever the target has FMA (aarch64 always; x86 with
# -mfma), which rounds once instead of twice and makes the CPU differ from the CUDA backend (built with
# --fmad=false) and from the other CPU variants. OCTOPT_FP_CONTRACT_OFF lets a target report that it
# got these flags (octopt.info()["fp_contract"]). FTZ/DAZ are not compile flags: docs/numerics.md says
# what happens when another library sets them in the MXCSR.
function(octopt_numerics_flags target)
  # Device code: nvcc's --fmad=false. Host code of .cu files goes through the host compiler, with its
  # own defaults, so it gets the host flag too.
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--fmad=false>)
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-ffp-contract=off>
                                             $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-ffp-contract=off>)
  elseif(MSVC)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:/fp:precise>)
  endif()
  target_compile_definitions(${target} PRIVATE OCTOPT_FP_CONTRACT_OFF=1)
endfunction()
