# cmake -DBUILD_DIR=<build tree> -DPROBES=<verdict:target:header;...> -P check_layers.cmake
# Builds each layer probe (tests/layering/CMakeLists.txt). A forbidden probe
# passes only when the compiler says its header was not found (gcc: "h: No
# such file or directory", clang: "'h' file not found"); any other failure,
# or a build that succeeds, fails the check. An allowed probe must build.
set(failures 0)
# The layers' libraries are built before the suite runs: with Makefiles, a
# probe's <target>/fast builds its object alone, without make walking the
# libraries' dependencies again (about 1.5 s a probe, most of this check).
if(EXISTS ${BUILD_DIR}/Makefile)
  set(fast "/fast")
else()
  set(fast "")
endif()
foreach(probe IN LISTS PROBES)
  string(REPLACE ":" ";" parts "${probe}")
  list(GET parts 0 verdict)
  list(GET parts 1 target)
  list(GET parts 2 header)
  execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD_DIR} --target ${target}${fast}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  string(REPLACE "." "\\." header_re "${header}")
  if(verdict STREQUAL "allowed")
    if(rc EQUAL 0)
      message(STATUS "ok: ${target} includes ${header}")
    else()
      message(SEND_ERROR "${target} should include ${header} but did not build:\n${out}")
      math(EXPR failures "${failures} + 1")
    endif()
  elseif(rc EQUAL 0)
    message(SEND_ERROR "${target} included ${header}, which its layer must not see")
    math(EXPR failures "${failures} + 1")
  elseif(out MATCHES "${header_re}'?: No such file or directory|'${header_re}' file not found")
    message(STATUS "ok: ${target} cannot include ${header}")
  else()
    message(SEND_ERROR "${target} failed for another reason than ${header} not found:\n${out}")
    math(EXPR failures "${failures} + 1")
  endif()
endforeach()
if(failures GREATER 0)
  message(FATAL_ERROR "${failures} layer probes did not behave as the layers say")
endif()
