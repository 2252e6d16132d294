#ifndef KLUA_VERSION_H
#define KLUA_VERSION_H
#define KLUA_VERSION "0.1.0"
#endif
