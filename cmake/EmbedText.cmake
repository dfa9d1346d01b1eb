# Writes a header holding a text file as one constant, at build time:
#   cmake -DINPUT=<file> -DOUTPUT=<header> -DNAME=<constant> -DNAMESPACE=<ns> -P EmbedText.cmake
# The text goes in a raw string literal, so it must not hold the delimiter
# )lmc_embed" (refused here with the file named, rather than a compile error).
file(READ "${INPUT}" text)
string(FIND "${text}" ")lmc_embed\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${INPUT} holds )lmc_embed\", the delimiter it is embedded with")
endif()
get_filename_component(source "${INPUT}" NAME)
file(WRITE "${OUTPUT}.new"
  "// Generated from ${source} by cmake/EmbedText.cmake at build time: edit ${source}.\n"
  "// Thread-safety: a constant.\n"
  "#pragma once\n\n#include <string_view>\n\nnamespace ${NAMESPACE} {\n\n"
  "inline constexpr std::string_view ${NAME} = R\"lmc_embed(${text})lmc_embed\";\n\n"
  "}  // namespace ${NAMESPACE}\n")
# Only a changed header is rewritten, so its includers rebuild only then.
file(COPY_FILE "${OUTPUT}.new" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.new")
