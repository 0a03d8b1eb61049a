# lumen_add_layer(NAME DEPS ... [TEST_DEPS ...])
#   Builds src/NAME/*.cc and src/NAME/arch/*.cc (except *_test.cc, *_fuzz.cc and main.cc) into the static
#   library lumen_NAME, and src/NAME/*_test.cc into the gtest binary lumen_NAME_tests.
#   Tests that time themselves against the machine (*_serial_test.cc) go into
#   lumen_NAME_serial_tests, which CTest runs alone (RUN_SERIAL, label "serial"): under
#   `ctest -j` beside other tests they would measure their neighbours.
#   Per-ISA translation units are recognised by suffix and get their own flags:
#     *_avx2.cc    -mavx2 -mfma -mf16c
#     *_avx512.cc  -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16 -mbmi2 -mfma -mf16c
#   Never set ISA flags globally: one binary must run on any x86-64.
function(lumen_add_layer NAME)
  cmake_parse_arguments(ARG "" "" "DEPS;TEST_DEPS" ${ARGN})
  set(dir ${CMAKE_SOURCE_DIR}/src/${NAME})
  file(GLOB srcs CONFIGURE_DEPENDS ${dir}/*.cc ${dir}/arch/*.cc)
  file(GLOB tests CONFIGURE_DEPENDS ${dir}/*_test.cc)
  file(GLOB serial_tests CONFIGURE_DEPENDS ${dir}/*_serial_test.cc)
  list(FILTER tests EXCLUDE REGEX "_serial_test\\.cc$")
  list(FILTER srcs EXCLUDE REGEX "(_test|_fuzz)\\.cc$")
  list(FILTER srcs EXCLUDE REGEX "/main\\.cc$")
  if(NOT srcs)  # header-only so far
    add_library(lumen_${NAME} INTERFACE)
    target_include_directories(lumen_${NAME} INTERFACE ${CMAKE_SOURCE_DIR}/src)
    target_link_libraries(lumen_${NAME} INTERFACE ${ARG_DEPS})
    return()
  endif()
  add_library(lumen_${NAME} STATIC ${srcs})
  target_include_directories(lumen_${NAME} PUBLIC ${CMAKE_SOURCE_DIR}/src)
  target_link_libraries(lumen_${NAME} PUBLIC ${ARG_DEPS})
  foreach(src ${srcs})
    if(src MATCHES "_avx2\\.cc$")
      set_source_files_properties(${src} PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma;-mf16c")
    elseif(src MATCHES "_avx512\\.cc$")
      set_source_files_properties(${src} PROPERTIES COMPILE_OPTIONS
        "-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mavx512vnni;-mavx512bf16;-mbmi2;-mavx2;-mfma;-mf16c")
    endif()
  endforeach()
  # Microbenchmarks: src/NAME/bench/*_bench.cc, one Google Benchmark program each.
  file(GLOB benches CONFIGURE_DEPENDS ${dir}/bench/*_bench.cc)
  if(benches AND benchmark_FOUND)
    foreach(b ${benches})
      get_filename_component(bname ${b} NAME_WE)
      add_executable(lumen_${bname} ${b})
      target_link_libraries(lumen_${bname} PRIVATE lumen_${NAME} benchmark::benchmark)
    endforeach()
  endif()
  if(LUMEN_BUILD_TESTS AND tests)
    add_executable(lumen_${NAME}_tests ${tests})
    target_link_libraries(lumen_${NAME}_tests PRIVATE lumen_${NAME} ${ARG_TEST_DEPS} GTest::gtest GTest::gtest_main)
    gtest_discover_tests(lumen_${NAME}_tests DISCOVERY_MODE PRE_TEST
      PROPERTIES ENVIRONMENT "LUMEN_SHARED=${LUMEN_SHARED_DIR}" TIMEOUT 600)
  endif()
  if(LUMEN_BUILD_TESTS AND serial_tests)
    add_executable(lumen_${NAME}_serial_tests ${serial_tests})
    target_link_libraries(lumen_${NAME}_serial_tests PRIVATE lumen_${NAME} ${ARG_TEST_DEPS} GTest::gtest GTest::gtest_main)
    gtest_discover_tests(lumen_${NAME}_serial_tests DISCOVERY_MODE PRE_TEST
      PROPERTIES ENVIRONMENT "LUMEN_SHARED=${LUMEN_SHARED_DIR}" TIMEOUT 600 RUN_SERIAL TRUE LABELS serial)
  endif()
endfunction()
