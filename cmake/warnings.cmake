# Compiler warnings for every target of the project.
add_compile_options(-Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes
                    -Wmissing-prototypes -Wformat=2 -Wundef -Wvla)
if(KVF_WERROR)
  add_compile_options(-Werror)
endif()
# fallocate, O_DIRECT, pthread extras and friends.
add_compile_definitions(_GNU_SOURCE)
