#!/usr/bin/python3
# tools/fit_erf.py: the coefficients of lt__verff (tensor/vmath.h), by least
# squares on Chebyshev nodes in double, with the float32 evaluation checked
# in ulps against math.erf. Prints, per degree, the max ulp error and the
# coefficients (lowest first). Region 1: erf(x) = x P(x^2) on |x| < 0.921875;
# region 2: erf(x) = 1 - exp(-x^2) R(x - 0.921875) on [0.921875, 3.925].
# Degrees 6 and 10 are the ones used. Needs numpy.
import numpy as np, math
f32=np.float32
def ulps(a, b):  # a float32 approx, b exact double
    b32=np.float32(b)
    sp=np.spacing(np.abs(b32)).astype(np.float64)
    return np.abs(a.astype(np.float64)-b)/sp
erf=np.vectorize(math.erf); erfc=np.vectorize(math.erfc)
# region 1: |x| < 0.9 ? erf(x) = x*P(x^2)
X1=0.921875
xs=np.cos(np.linspace(0,np.pi,4000))*X1/2+X1/2
xs=xs[xs>1e-4]
z=xs*xs
for deg in [5,6,7]:
    # weighted least squares in relative terms: P(z) ~ erf(x)/x
    y=erf(xs)/xs
    V=np.vander(z,deg+1,increasing=True)
    c,*_=np.linalg.lstsq(V,y,rcond=None)
    # eval in f32 horner
    cf=c.astype(f32)
    xt=np.linspace(0,X1,200001).astype(f32); zt=xt*xt
    p=np.full_like(xt,cf[-1])
    for cc in cf[-2::-1]: p=(p*zt+cc).astype(f32)
    r=(xt*p).astype(f32)
    e=ulps(r[1:],erf(xt[1:].astype(np.float64)))
    print('r1 deg',deg,e.max(), list(map(float,cf)))
# region 2: X1 <= x < 3.92: erf = 1 - exp(-x^2)*R(x)
lo,hi=X1,3.925
xs=np.cos(np.linspace(0,np.pi,4000))*(hi-lo)/2+(hi+lo)/2
y=erfc(xs)*np.exp(xs*xs)
for deg in [8,9,10,11,12]:
    t=(xs-lo)  # poly in t
    V=np.vander(t,deg+1,increasing=True)
    c,*_=np.linalg.lstsq(V,y,rcond=None)
    cf=c.astype(f32)
    xt=np.linspace(lo,5,400001).astype(f32); tt=(xt-f32(lo)).astype(f32)
    p=np.full_like(xt,cf[-1])
    for cc in cf[-2::-1]: p=(p*tt+cc).astype(f32)
    # exp(-x^2) in f32: emulate with float64 exp of f32 product, then round
    ex=np.exp(-(xt*xt).astype(f32).astype(np.float64)).astype(f32)
    r=(f32(1)-(ex*p).astype(f32)).astype(f32)
    r=np.where(xt>=hi, f32(1), r)
    e=ulps(r,erf(xt.astype(np.float64)))
    print('r2 deg',deg,e.max(), list(map(float,cf)))
