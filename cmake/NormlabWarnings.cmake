# normlab_set_warnings(<target>): the project's warning flags, applied PRIVATE to its own targets.
function(normlab_set_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter -Winvalid-pch>)
  if(NORMLAB_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
  endif()
endfunction()
