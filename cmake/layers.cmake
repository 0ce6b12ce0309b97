# kvf_layer(NAME SOURCES ... [LIBS ...])
# A layer is compiled once, position-independent and with hidden symbols,
# as an OBJECT library NAME_obj.  Its objects make the static library NAME
# that tests and benchmarks link, and also go into libkvflash (shared and
# static), which exports only the KVF_API symbols.
function(kvf_layer name)
  cmake_parse_arguments(L "" "" "SOURCES;LIBS" ${ARGN})
  add_library(${name}_obj OBJECT ${L_SOURCES})
  set_target_properties(${name}_obj PROPERTIES
    POSITION_INDEPENDENT_CODE ON C_VISIBILITY_PRESET hidden)
  target_compile_definitions(${name}_obj PUBLIC KVF_BUILDING_LIBRARY)
  target_include_directories(${name}_obj PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/api>)
  target_link_libraries(${name}_obj PUBLIC ${L_LIBS})
  add_library(${name} STATIC $<TARGET_OBJECTS:${name}_obj>)
  target_link_libraries(${name} PUBLIC ${name}_obj)
  set_property(GLOBAL APPEND PROPERTY KVF_LAYER_OBJECTS ${name}_obj)
endfunction()
