# Installation by role, and Debian packages (deploy/package.sh). Each
# program, its man page and its systemd unit belong to one install
# component, and each component is one package: hub (rshub, and rspub, the
# client that publishes to it), subscriber (rssub), source (rssource),
# bridge (rsbridge), tools (rsdoc). A plain `cmake --install` puts the
# programs and man pages under the prefix, as it always did; with
# -DRS_PACKAGE=ON (and -DCMAKE_INSTALL_PREFIX=/usr) it also installs the
# units, the example configurations under /etc, each package's copyright
# and changelog, and CPack's DEB generator makes the packages, their
# dependencies found by dpkg-shlibdeps.

include(GNUInstallDirs)
option(RS_PACKAGE "Install units and /etc examples; configure CPack DEB" OFF)

# rs_role(COMPONENT PROGRAMS UNIT USER SUMMARY DESCRIPTION): one package.
# PROGRAMS their man pages (the programs' own install() is in their
# directories); UNIT the file in deploy/systemd/ ("" none); USER the
# system user it runs as ("" none); the rest become the Description.
set(RS_ROLES)
macro(rs_role comp progs unit user summary desc)
  list(APPEND RS_ROLES ${comp})
  set(RS_ROLE_${comp}_PROGS ${progs})
  set(RS_ROLE_${comp}_UNIT "${unit}")
  set(RS_ROLE_${comp}_USER "${user}")
  set(RS_ROLE_${comp}_SUMMARY "${summary}")
  set(RS_ROLE_${comp}_DESC "${desc}")
endmacro()
rs_role(hub "rshub;rspub" rshub.service ""
  "ResourceSync push notification hub"
  "rshub takes notifications published by ResourceSync Sources, keeps them in\nRedis streams and delivers them over WebSocket channels (resumable) and to\nWebSub callbacks. rspub publishes a notification from a script.")
rs_role(subscriber rssub rssub@.service rssub
  "ResourceSync subscriber that keeps a mirror in step"
  "rssub mirrors a ResourceSync Source into a directory: a baseline from its\nResource List, then its changes as they are pushed (WebSocket, WebSub) or\npolled from its Change Lists, with audits; one rssub@NAME unit per mirror.")
rs_role(source rssource rssource@.service rssource
  "directory served as a ResourceSync Source that pushes"
  "rssource serves a directory as a ResourceSync Source (Resource and Change\nLists) and publishes each change to a hub through a durable outbox; one\nrssource@NAME unit per directory.")
rs_role(bridge rsbridge rsbridge.service rsbridge
  "push for pull-only ResourceSync Sources"
  "rsbridge polls ResourceSync Sources that only publish documents, finds\ntheir changes and publishes them to a hub once and in order, and serves\nbridged Capability Lists that name the hub's channels.")
rs_role(tools rsdoc "" ""
  "ResourceSync document validator and explorer"
  "rsdoc validates ResourceSync documents (every error told, with its spec\nsection), shows them, and explores a Source from any of its URLs.")

set(rs_man_dir ${CMAKE_CURRENT_SOURCE_DIR}/man)
foreach(comp IN LISTS RS_ROLES)
  foreach(prog IN LISTS RS_ROLE_${comp}_PROGS)
    if(NOT RS_PACKAGE)
      install(FILES ${rs_man_dir}/${prog}.1 DESTINATION share/man/man1
              COMPONENT ${comp})
      continue()
    endif()
    # Debian compresses man pages (policy 12.1); -n keeps the build
    # reproducible (no name or time in the gzip header).
    set(gz ${CMAKE_BINARY_DIR}/pkg/man/${prog}.1.gz)
    add_custom_command(OUTPUT ${gz}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/pkg/man
      COMMAND gzip -9n < ${rs_man_dir}/${prog}.1 > ${gz}
      DEPENDS ${rs_man_dir}/${prog}.1 VERBATIM)
    list(APPEND rs_pkg_outputs ${gz})
    install(FILES ${gz} DESTINATION share/man/man1 COMPONENT ${comp})
  endforeach()
endforeach()

if(NOT RS_PACKAGE)
  return()
endif()

if(NOT CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  message(FATAL_ERROR "RS_PACKAGE: configure with -DCMAKE_INSTALL_PREFIX=/usr "
                      "(the units name the programs by their installed path)")
endif()

set(RS_DEB_MAINTAINER
    "rspush maintainers <maintainers@users.noreply.a-seed-b549fdd6.example>"
    CACHE STRING "Maintainer: field of the Debian packages")
set(rs_deb_src ${CMAKE_CURRENT_SOURCE_DIR}/deploy/debian)
set(rs_sd_src ${CMAKE_CURRENT_SOURCE_DIR}/deploy/systemd)
# The changelog's date: the checkout's last commit, so that two builds of
# one commit make the same packages.
execute_process(COMMAND git -C ${CMAKE_CURRENT_SOURCE_DIR} log -1 --format=%aD
                OUTPUT_VARIABLE rs_deb_date OUTPUT_STRIP_TRAILING_WHITESPACE
                ERROR_QUIET)
if(NOT rs_deb_date)
  set(rs_deb_date "Thu, 01 Jan 1970 00:00:00 +0000")
endif()

foreach(comp IN LISTS RS_ROLES)
  set(pkg rspush-${comp})
  # What dh_strip does beyond CPack's strip: the compiler's and the C
  # runtime's .comment sections go too. (Runs after the programs' own
  # install rules, which strip them: policy CMP0082 keeps the order.)
  foreach(prog IN LISTS RS_ROLE_${comp}_PROGS)
    install(CODE "execute_process(COMMAND ${CMAKE_OBJCOPY} --remove-section=.comment
      --remove-section=.note \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/bin/${prog}\"
      COMMAND_ERROR_IS_FATAL ANY)" COMPONENT ${comp})
  endforeach()
  set(out ${CMAKE_BINARY_DIR}/pkg/${comp})
  set(unit "${RS_ROLE_${comp}_UNIT}")
  set(user "${RS_ROLE_${comp}_USER}")

  # The units in deploy/systemd/ run /usr/local/bin/PROG (cmake --install's
  # default prefix); the packaged ones run the program the package installs.
  if(unit)
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
                 ${rs_sd_src}/${unit})
    file(READ ${rs_sd_src}/${unit} text)
    string(REPLACE "/usr/local/bin/" "${CMAKE_INSTALL_FULL_BINDIR}/" text "${text}")
    if(user)
      string(REPLACE "Create the user once" "The package ${pkg} created the user in its\n# postinst; by hand" text "${text}")
    endif()
    file(WRITE ${out}/${unit} "${text}")
    install(FILES ${out}/${unit} DESTINATION /lib/systemd/system
            COMPONENT ${comp})
    # An example of its configuration; the service starts once the operator
    # wrote the real one (an example with placeholder tokens must not run).
    string(REGEX REPLACE "@?\\.service$" "" daemon ${unit})
    install(FILES ${rs_sd_src}/${daemon}.conf.example
            DESTINATION /etc/${daemon} COMPONENT ${comp})
  endif()

  # Maintainer scripts, from one set of templates: @RS_USER@, @RS_UNIT@,
  # @RS_STATE@ (the unit's StateDirectory=, deleted on purge).
  set(RS_PKG ${pkg})
  set(RS_USER "${user}")
  set(RS_UNIT "")
  set(RS_STATE "")
  if(unit)
    string(REPLACE "@.service" "@*.service" RS_UNIT ${unit})
    if(user)
      set(RS_STATE /var/lib/${daemon})
    endif()
  endif()
  set(scripts)
  if(unit)
    # Every file under /etc is a conffile (policy 10.7.2): an upgrade keeps
    # the operator's edits; a purge removes it.
    file(WRITE ${out}/control/conffiles "/etc/${daemon}/${daemon}.conf.example\n")
    list(APPEND scripts ${out}/control/conffiles)
    # The #user{ ... #}user blocks are kept (markers dropped) for a package
    # with a user, and left out for one without.
    if(user)
      set(sed_expr "/#user{$/d;/#}user$/d")
    else()
      set(sed_expr "/#user{$/,/#}user$/d")
    endif()
    foreach(s postinst prerm postrm)
      set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
                   ${rs_deb_src}/${s}.in)
      configure_file(${rs_deb_src}/${s}.in ${out}/in/${s} @ONLY)
      file(MAKE_DIRECTORY ${out}/sed)
      execute_process(COMMAND sed -e "${sed_expr}" ${out}/in/${s}
                      OUTPUT_FILE ${out}/sed/${s} COMMAND_ERROR_IS_FATAL ANY)
      file(COPY ${out}/sed/${s} DESTINATION ${out}/control
           FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE
           GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
      list(APPEND scripts ${out}/control/${s})
    endforeach()
  endif()

  # /usr/share/doc/PKG: copyright (policy 12.5) and, the version being
  # native, changelog.gz.
  set(RS_VERSION ${PROJECT_VERSION})
  set(RS_DATE "${rs_deb_date}")
  set(RS_MAINTAINER "${RS_DEB_MAINTAINER}")
  configure_file(${rs_deb_src}/changelog.in ${out}/changelog @ONLY)
  add_custom_command(OUTPUT ${out}/changelog.gz
    COMMAND gzip -9n < ${out}/changelog > ${out}/changelog.gz
    DEPENDS ${out}/changelog VERBATIM)
  list(APPEND rs_pkg_outputs ${out}/changelog.gz)
  install(FILES ${rs_deb_src}/copyright ${out}/changelog.gz
          DESTINATION share/doc/${pkg} COMPONENT ${comp})

  string(TOUPPER ${comp} C)
  set(CPACK_DEBIAN_${C}_PACKAGE_NAME ${pkg})
  set(CPACK_DEBIAN_${C}_DESCRIPTION
      "${RS_ROLE_${comp}_SUMMARY}\n${RS_ROLE_${comp}_DESC}")
  set(CPACK_DEBIAN_${C}_PACKAGE_CONTROL_EXTRA "${scripts}")
  if(user)
    # adduser/deluser in the maintainer scripts
    set(CPACK_DEBIAN_${C}_PACKAGE_DEPENDS adduser)
  endif()
endforeach()
add_custom_target(rs_pkg_files ALL DEPENDS ${rs_pkg_outputs})

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME rspush)
set(CPACK_PACKAGE_VENDOR rspush)
set(CPACK_PACKAGE_CONTACT "${RS_DEB_MAINTAINER}")
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_STRIP_FILES ON)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL ${RS_ROLES})
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_PACKAGE_DIRECTORY ${CMAKE_BINARY_DIR}/packages)
include(CPack)
