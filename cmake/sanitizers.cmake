# KVF_SANITIZE=address: ASan + UBSan, any finding fails the run.
# KVF_SANITIZE=thread:  TSan, for the plain-C concurrency tests.
if(KVF_SANITIZE STREQUAL "address")
  set(kvf_san -fsanitize=address,undefined -fno-sanitize-recover=all
              -fno-omit-frame-pointer)
elseif(KVF_SANITIZE STREQUAL "thread")
  set(kvf_san -fsanitize=thread -fno-omit-frame-pointer)
elseif(NOT KVF_SANITIZE STREQUAL "")
  message(FATAL_ERROR "KVF_SANITIZE='${KVF_SANITIZE}': use '', 'address' or 'thread'")
endif()
if(kvf_san)
  add_compile_options(${kvf_san})
  add_link_options(${kvf_san})
endif()
