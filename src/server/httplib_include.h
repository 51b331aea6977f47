// Includes cpp-httplib as Debian builds it: a compiled libcpp-httplib with OpenSSL, zlib and
// Brotli support. The class layouts depend on these switches, so every user of httplib.h must
// see the same ones as the library was built with (pkg-config --cflags cpp-httplib).
#pragma once

#ifndef CPPHTTPLIB_OPENSSL_SUPPORT
#define CPPHTTPLIB_OPENSSL_SUPPORT
#endif
#ifndef CPPHTTPLIB_ZLIB_SUPPORT
#define CPPHTTPLIB_ZLIB_SUPPORT
#endif
#ifndef CPPHTTPLIB_BROTLI_SUPPORT
#define CPPHTTPLIB_BROTLI_SUPPORT
#endif
#include <httplib.h>
